import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { createTwoFilesPatch } from 'diff';
import { analyse } from './analyse';
import { beyondCeiling } from './ceiling';
import {
  type DecisionChannel,
  type DecisionScope,
  KINDS,
  type ProposalKind,
  sha256,
} from './contract';
import { Exchange, newRequestId } from './exchange';
import type { Policy } from './policy';
import type {
  Evidence,
  Remediation,
  RequestFilter,
  SuperviseRecords,
  SuperviseRequest,
} from './store';
import { validateProposal } from './validate';

/** Where the desk finds a bottle's supervise files, and what it knows of the bottle. */
export interface SupervisedBottles {
  /** The bottles to look at (running and frozen). */
  slugs(): string[];
  /** `$BB_HOME/bottles/<slug>` */
  dir(slug: string): string;
  /** The bottle's turn in progress, if any. */
  turn(slug: string): number | null;
  /** Images a proposed Dockerfile may start from, for this bottle (its own image first). */
  allowedBases(slug: string): string[];
}

/** Applies an approved file to a bottle, without entering it. */
export interface Remediator {
  /** Write the routes or allowlist and reload the bottle's proxies in place. */
  reloadProxies(
    slug: string,
    kind: 'routes' | 'allowlist',
    text: string,
    scope: DecisionScope,
  ): Promise<Remediation>;
  /** Build the image and replace the agent's container (same workspace, home, branch and session). */
  rebuild?(slug: string, dockerfile: string, requestId: string, note: string): Promise<Remediation>;
  /**
   * After the agent was told a rebuild's approval: give it a moment to end its
   * turn itself (so its session is recorded), then stop it; its bottle goes on
   * in the new image.
   */
  afterRebuild?(slug: string): Promise<void>;
}

export interface SuperviseDeskOptions {
  /** Where requests and decisions are kept: this orchestrator's SQLite, or the fleet's PostgreSQL. */
  store: SuperviseRecords;
  bottles: SupervisedBottles;
  policy: Policy;
  remediator?: Remediator | undefined;
  /**
   * Whether this desk applies decisions to `slug`: in a fleet, only the replica whose
   * engine runs the bottle can reload its proxies or rebuild it. A decision made on
   * another replica is kept decided and unapplied, and this one applies it at its next
   * `sync`. Default: every bottle is this desk's (one orchestrator).
   */
  appliesTo?: (slug: string) => boolean | Promise<boolean>;
  now?: () => number;
}

/** A request as the operator sees it: with its diff and whether the agent is looping. */
export interface RequestView extends SuperviseRequest {
  file: string;
  diff: string;
  /** Rejections in a row for this bottle and kind (3 or more: the agent is looping). */
  rejections: number;
  /** Where the proposal goes past the operator's ceiling (approving needs an override). */
  beyondCeiling: string[];
}

/** What an approval (or an operator's own edit) did. */
export interface DecisionOutcome {
  request: SuperviseRequest;
  /** `null`: decided here, applied by the replica that runs the bottle (`SuperviseDeskOptions.appliesTo`). */
  remediation: Remediation | null;
}

/** One request as a run record keeps it. */
export interface AuditEntry {
  id: string;
  kind: string;
  tool: string;
  createdAt: string;
  justification: string;
  candidateHash: string;
  status: string;
  decision: {
    by: string;
    /** Through what (forge, api, cli, tui, auto, system); absent in records made before it was kept. */
    via: DecisionChannel | null;
    at: string;
    scope: string | null;
    finalHash: string | null;
    reason: string | null;
    override: boolean;
  } | null;
  remediation: { ok: boolean; detail: string; at: string | null } | null;
}

export const CURRENT_CONFIG = 'current-config';
/** How long a desk's claim on applying a decision holds (a rebuild included) before another may take it. */
export const APPLY_STALE_MS = 30 * 60_000;
/** A decision's remediation when its file was in place already (applied, then its record failed). */
const IN_PLACE = 'in place already';
/** The tool an operator's own edit made over the API is recorded as (checked as a proposal). */
export const REMOTE_EDIT = 'operator-edit-api';
export const EXCHANGE = 'supervise';

/** Who decides, and through what: kept with the decision and in the turn's record. */
export interface Decider {
  by: string;
  via: DecisionChannel;
}

/** How a request is approved (see `SuperviseDesk.approve`). */
export interface Decision extends Decider {
  scope?: DecisionScope;
  edited?: string | undefined;
  expect?: { baseHash?: string; candidateHash?: string } | undefined;
  override?: boolean;
}

/**
 * The operator's side of the supervise plane: takes in what bottles asked for,
 * shows it with its diff and findings, and carries out the decision (approve,
 * modify, reject, cancel) — the remediation first, then the answer to the agent.
 */
export class SuperviseDesk {
  readonly #o: SuperviseDeskOptions;
  readonly #now: () => number;

  constructor(options: SuperviseDeskOptions) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
  }

  exchange(slug: string): Exchange {
    return new Exchange(join(this.#o.bottles.dir(slug), EXCHANGE));
  }

  /** The file a bottle runs with now (as its agent sees it), or empty. */
  current(slug: string, kind: ProposalKind): string {
    const f = join(this.#o.bottles.dir(slug), CURRENT_CONFIG, KINDS[kind].file);
    return existsSync(f) ? readFileSync(f, 'utf8') : '';
  }

  /**
   * Take in every new request of every bottle (with its evidence and findings), expire
   * what waited past its TTL, and apply what was decided elsewhere (on another replica,
   * or by a desk that died applying) for bottles this desk applies to. Returns what
   * changed. The orchestrator calls it every few seconds; reading (`list`, `show`,
   * `awaitingOperator`) only takes requests in.
   */
  async sync(
    only?: string,
  ): Promise<{ ingested: string[]; expired: string[]; applied: string[]; bad: string[] }> {
    const taken = await this.#takeIn(only, { expire: true });
    const applied: string[] = [];
    if (!this.#o.remediator) return { ...taken, applied };
    const mine = new Set(only ? [only] : this.#o.bottles.slugs());
    for (const r of await this.#o.store.unapplied()) {
      if (!mine.has(r.slug) || this.#inFlight.has(r.id)) continue;
      try {
        if (!(await this.#appliesTo(r.slug))) continue;
        const out = await this.#serial(r.slug, r.kind, () => this.#applyDecided(r.id));
        if (out?.remediation) applied.push(r.id);
      } catch (err) {
        // One that cannot be applied now is tried again at the next sync.
        taken.bad.push(`${r.slug}/${r.id}: ${(err as Error).message}`);
      }
    }
    return { ...taken, applied };
  }

  /** Take in new requests (of `only`, or of every bottle), and with `expire` expire old ones. */
  async #takeIn(
    only?: string,
    o: { expire?: boolean } = {},
  ): Promise<{ ingested: string[]; expired: string[]; bad: string[] }> {
    const ingested: string[] = [];
    const bad: string[] = [];
    for (const slug of only ? [only] : this.#o.bottles.slugs()) {
      const ex = this.exchange(slug);
      const seen: string[] = [];
      const ids = ex.requestIds();
      // Known requests are not read again: a sync costs a directory listing and one query.
      const known = ids.length ? await this.#o.store.known(ids) : new Set<string>();
      for (const id of ids) {
        if (known.has(id)) continue;
        const r = ex.request(id);
        if (!r || r.slug !== slug) {
          seen.push(`${id}.json`);
          continue;
        }
        const base = this.current(slug, r.kind);
        // The sidecar says which file it started from; the host checks it against its own.
        const baseText = sha256(base) === r.baseHash ? base : '';
        if (
          await this.#o.store.ingest(r, {
            base: baseText,
            evidence: this.#evidence(slug, r.kind, r.createdAt),
            findings: analyse(r.kind, baseText, r.file),
            turn: this.#o.bottles.turn(slug),
          })
        )
          ingested.push(r.id);
      }
      bad.push(...seen.map((n) => `${slug}/${n}`));
    }
    const expired: string[] = [];
    if (o.expire)
      for (const r of await this.#o.store.expired(this.#now())) {
        if (only && r.slug !== only) continue;
        if (
          await this.#decide(r, {
            status: 'expired',
            by: 'bot-bottle',
            via: 'system',
            reason: 'nobody decided before the TTL',
          })
        )
          expired.push(r.id);
      }
    return { ingested, expired, bad };
  }

  async list(filter: RequestFilter = {}): Promise<RequestView[]> {
    await this.#takeIn(undefined, { expire: true });
    return Promise.all((await this.#o.store.list(filter)).map((r) => this.#view(r)));
  }

  async show(id: string): Promise<RequestView> {
    await this.#takeIn(undefined, { expire: true });
    return this.#view(await this.#get(id));
  }

  async #appliesTo(slug: string): Promise<boolean> {
    return this.#o.appliesTo ? await this.#o.appliesTo(slug) : true;
  }

  /** Requests this desk is applying now: a sync meanwhile leaves them alone. */
  readonly #inFlight = new Set<string>();
  /** This desk, as its claims on applying name it. */
  readonly #me = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;

  /**
   * One approval of a bottle's proxies (allowlist and routes reload together) or image
   * at a time: the next is checked against what the one before it applied (two approved
   * from the same base, the second is a CONFLICT) and never reloads over it.
   */
  async #serial<T>(slug: string, kind: ProposalKind, work: () => Promise<T>): Promise<T> {
    const key = `${slug}\0${kind === 'dockerfile' ? 'image' : 'proxies'}`;
    const run = (this.#applying.get(key) ?? Promise.resolve()).catch(() => {}).then(work);
    this.#applying.set(key, run);
    try {
      return await run;
    } finally {
      if (this.#applying.get(key) === run) this.#applying.delete(key);
    }
  }

  /**
   * Approve a pending request (with `edited`, the operator's own version: `modified`).
   * `expect` binds the decision to the hashes of the files the operator was shown:
   * if either changed since, it must be reviewed again.
   */
  async approve(id: string, d: Decision): Promise<DecisionOutcome> {
    await this.#takeIn(undefined, { expire: true });
    const r = await this.#pending(id);
    return this.#serial(r.slug, r.kind, () => this.#approve(id, d));
  }

  readonly #applying = new Map<string, Promise<unknown>>();

  async #approve(id: string, d: Decision): Promise<DecisionOutcome> {
    // Never the applying of others here: this runs in its bottle's turn of #serial.
    await this.#takeIn(undefined, { expire: true });
    const r = await this.#pending(id);
    if (d.expect?.baseHash && !r.baseHash.startsWith(d.expect.baseHash))
      throw new BbError(
        'CONFLICT',
        `request ${id}: the current file is not the one you reviewed; show it again`,
      );
    if (d.expect?.candidateHash && !r.candidateHash.startsWith(d.expect.candidateHash))
      throw new BbError(
        'CONFLICT',
        `request ${id}: the proposal is not the one you reviewed; show it again`,
      );
    // A replica that does not see the bottle's files (another machine's, in a fleet with
    // no shared store) checks against the file the request was made from, as recorded.
    const seen = this.#o.bottles.slugs().includes(r.slug);
    if (!seen && r.kind === 'dockerfile')
      throw new BbError(
        'INVALID_INPUT',
        `request ${id} rebuilds ${r.slug}, whose files this replica does not see: decide it through the replica that runs it (nothing was decided)`,
      );
    const base = seen ? this.current(r.slug, r.kind) : r.base;
    if (sha256(base) !== r.baseHash)
      throw new BbError(
        'CONFLICT',
        `request ${id}: ${r.slug}'s ${KINDS[r.kind].file} changed since the agent proposed this; reject it (the agent proposes again from the new file) or edit the file yourself`,
      );
    const modified = d.edited !== undefined && d.edited !== r.candidate;
    const final = modified ? d.edited! : r.candidate;
    if (modified)
      validateProposal(r.kind, final, { allowedBases: this.#o.bottles.allowedBases(r.slug) });
    // Checked again here, on the file about to be applied, by the rules in force now.
    validateProposal(r.kind, final, {
      allowedBases: this.#o.bottles.allowedBases(r.slug),
      operator: r.tool === 'operator-edit',
    });
    // The operator's own edit is the operator's to make; a bottle's request names only offered secrets.
    const undeclared = newSecrets(r.kind, base, r.tool === 'operator-edit' ? base : final).filter(
      (n) => !(n in this.#o.policy.credentialHosts),
    );
    if (undeclared.length)
      throw new BbError(
        'SCOPE_DENIED',
        `request ${id} names ${undeclared.map((n) => `env:${n}`).join(', ')}, which the operator has not declared for bottles: add ${undeclared.join(', ')} to credentialHosts in $BB_HOME/config/supervise.json first (no override lets a bottle name a secret the operator did not offer)`,
      );
    const beyond = beyondCeiling(r.kind, base, final, this.#o.policy);
    if (beyond.length && !d.override)
      throw new BbError(
        'SCOPE_DENIED',
        `request ${id} goes beyond the operator's ceiling: ${beyond.join('; ')}. Approve with --override to exceed it, or edit the file`,
        { data: { beyond } },
      );
    // A rebuilt image stays with its bottle: a capability is never for one turn only.
    const scope = d.scope ?? (r.kind === 'dockerfile' ? 'bottle' : 'turn');
    if (r.kind === 'dockerfile' && scope === 'turn')
      throw new BbError(
        'INVALID_INPUT',
        `request ${id} rebuilds the image, which stays for the bottle: approve it with scope bottle`,
      );
    // Applied here, or kept for the replica that runs the bottle.
    const here = seen && (await this.#appliesTo(r.slug));
    if (here && !this.#o.remediator)
      throw new BbError(
        'INVALID_INPUT',
        'this desk cannot apply decisions (no remediator): nothing was decided',
      );
    if (here && r.kind === 'dockerfile' && !this.#o.remediator?.rebuild)
      throw new BbError('INVALID_INPUT', 'this desk cannot rebuild images: nothing was decided');
    if (here) this.#inFlight.add(id);
    try {
      const at = new Date(this.#now()).toISOString();
      const decided = await this.#o.store.decide(id, {
        status: modified ? 'modified' : 'approved',
        by: d.by,
        via: d.via,
        at,
        scope,
        final: { text: final, hash: sha256(final) },
        override: !!d.override && beyond.length > 0,
        // Claimed with the decision: no other desk's sync applies it meanwhile.
        ...(here ? { applying: { by: this.#me, at } } : {}),
      });
      if (!decided)
        throw new BbError(
          'CONFLICT',
          `request ${id} was decided meanwhile: ${(await this.#get(id)).status}`,
        );
      const out = here ? await this.#applyDecided(id) : undefined;
      if (out) return out;
      const now = await this.#get(id);
      return { request: now, remediation: now.remediation };
    } finally {
      this.#inFlight.delete(id);
    }
  }

  /**
   * Apply a decided (approved or modified) request not applied yet: the remediation
   * first, then the answer to the agent, which hears `approved` only once the change is
   * in place. `undefined` when it was applied meanwhile.
   */
  async #applyDecided(id: string): Promise<DecisionOutcome | undefined> {
    const r = await this.#get(id);
    if ((r.status !== 'approved' && r.status !== 'modified') || r.remediation) return undefined;
    // One desk applies it, of every process and replica that sees it.
    if (!(await this.#claim(id))) return undefined;
    // Held while it is applied (a rebuild can take long): no other desk takes it over.
    const renew = setInterval(() => void this.#claim(id).catch(() => {}), APPLY_STALE_MS / 6);
    renew.unref();
    const remediator = this.#o.remediator!;
    const final = r.final ?? r.candidate;
    const scope = r.scope ?? (r.kind === 'dockerfile' ? 'bottle' : 'turn');
    let remediation: Remediation;
    try {
      remediation = await this.#remediate(r, final, scope, remediator);
    } catch (err) {
      remediation = { ok: false, detail: (err as Error).message };
    } finally {
      clearInterval(renew);
    }
    // Recorded only while the claim is still this desk's (one that took it over records).
    const at = new Date(this.#now()).toISOString();
    if (!(await this.#o.store.recordRemediation(id, remediation, at, this.#me))) return undefined;
    const after = await this.#get(id);
    if (remediation.ok)
      this.exchange(r.slug).writeDecision({
        id,
        status: after.status as 'approved' | 'modified',
        scope,
        file: final,
        decidedAt: after.decidedAt!,
      });
    if (remediation.ok && r.kind === 'dockerfile' && remediation.detail !== IN_PLACE)
      await remediator.afterRebuild?.(r.slug);
    if (!remediation.ok)
      this.exchange(r.slug).writeDecision({
        id,
        status: 'cancelled',
        reason: `approved, but applying it failed: ${remediation.detail}`,
        decidedAt: after.decidedAt!,
      });
    return { request: after, remediation };
  }

  /** Claim (or renew this desk's claim on) applying `id`. */
  #claim(id: string): Promise<boolean> {
    const now = this.#now();
    return this.#o.store.claimApply(
      id,
      this.#me,
      new Date(now).toISOString(),
      new Date(now - APPLY_STALE_MS).toISOString(),
    );
  }

  /**
   * Apply a decided request to its bottle as it is now. Decided elsewhere, perhaps a
   * while ago, by a replica with its own configuration: checked again here by this
   * desk's rules (the file it was proposed from, the turn a turn's grant was for, the
   * proposal's validity, the secrets offered and the ceiling). A file already in
   * place (applied, then the record failed) is not applied again.
   */
  async #remediate(
    r: SuperviseRequest,
    final: string,
    scope: DecisionScope,
    remediator: Remediator,
  ): Promise<Remediation> {
    const current = this.current(r.slug, r.kind);
    if (r.finalHash && sha256(current) === r.finalHash && r.finalHash !== r.baseHash)
      return { ok: true, detail: IN_PLACE };
    if (sha256(current) !== r.baseHash)
      throw new Error(
        `${r.slug}'s ${KINDS[r.kind].file} changed between the proposal and the decision's being applied`,
      );
    if (scope === 'turn' && r.turn !== null && r.turn !== this.#o.bottles.turn(r.slug))
      throw new Error(`it was for turn ${r.turn}, which ended before it could be applied`);
    validateProposal(r.kind, final, {
      allowedBases: this.#o.bottles.allowedBases(r.slug),
      operator: r.tool === 'operator-edit',
    });
    const undeclared = newSecrets(
      r.kind,
      current,
      r.tool === 'operator-edit' ? current : final,
    ).filter((n) => !(n in this.#o.policy.credentialHosts));
    if (undeclared.length)
      throw new Error(
        `it names ${undeclared.map((n) => `env:${n}`).join(', ')}, which this orchestrator does not offer bottles (credentialHosts)`,
      );
    const beyond = beyondCeiling(r.kind, current, final, this.#o.policy);
    if (beyond.length && !r.override)
      throw new Error(`it goes beyond this orchestrator's ceiling: ${beyond.join('; ')}`);
    if (r.kind !== 'dockerfile') return remediator.reloadProxies(r.slug, r.kind, final, scope);
    if (!remediator.rebuild) return { ok: false, detail: 'this replica cannot rebuild images' };
    return remediator.rebuild(
      r.slug,
      final,
      r.id,
      `the operator ${r.status === 'modified' ? 'approved with changes' : 'approved'} your capability-block request ${r.id}`,
    );
  }

  /**
   * The operator's own change to a bottle's routes or allowlist (no proposal):
   * checked, applied by the same reload, and kept like an approved request. On the
   * orchestrator's host it is the operator's to make (a `file:` reference, any secret,
   * past the ceiling). Made from elsewhere (`via: 'api'`: a token, not a login on the
   * host) it is checked as an agent's proposal is: `env:` references to the secrets the
   * operator offered only, and the ceiling unless `override` is asked for.
   */
  async operatorEdit(
    slug: string,
    kind: 'routes' | 'allowlist',
    text: string,
    who: Decider,
    scope: DecisionScope = 'bottle',
    o: { override?: boolean } = {},
  ): Promise<DecisionOutcome> {
    const remote = who.via === 'api';
    validateProposal(kind, text, { allowedBases: [], operator: !remote });
    const base = this.current(slug, kind);
    const now = this.#now();
    const id = newRequestId();
    await this.#o.store.ingest(
      {
        id,
        slug,
        kind,
        tool: remote ? REMOTE_EDIT : 'operator-edit',
        file: text,
        justification: `edited by ${who.by}`,
        baseHash: sha256(base),
        candidateHash: sha256(text),
        createdAt: new Date(now).toISOString(),
        expiresAt: new Date(now + 3600_000).toISOString(),
      },
      { base, evidence: [], findings: analyse(kind, base, text), turn: this.#o.bottles.turn(slug) },
    );
    // The operator is the ceiling's author: an own edit on the host overrides it knowingly.
    return this.approve(id, { ...who, scope, override: remote ? !!o.override : true });
  }

  /** Reject a pending request; the agent is told `reason` verbatim. */
  async reject(id: string, reason: string, who: Decider): Promise<SuperviseRequest> {
    if (!reason.trim())
      throw new BbError('INVALID_INPUT', 'a rejection needs a reason: the agent is told it');
    await this.#takeIn(undefined, { expire: true });
    const r = await this.#pending(id);
    if (!(await this.#decide(r, { status: 'rejected', ...who, reason })))
      throw new BbError(
        'CONFLICT',
        `request ${id} was decided meanwhile: ${(await this.#get(id)).status}`,
      );
    return this.#get(id);
  }

  /** Cancel a pending request (the bottle went away, or the operator withdrew it). */
  async cancel(
    id: string,
    who: Decider,
    reason = 'cancelled by the operator',
  ): Promise<SuperviseRequest> {
    await this.#takeIn(undefined, { expire: true });
    const r = await this.#pending(id);
    await this.#decide(r, { status: 'cancelled', ...who, reason });
    return this.#get(id);
  }

  /** Cancel every pending request of a bottle (destroyed, or its turn ended for good). */
  async cancelAll(slug: string, reason: string): Promise<string[]> {
    // What cannot be taken in now is cancelled by its TTL; what is known is cancelled here.
    await this.#takeIn(slug).catch(() => {});
    const cancelled: string[] = [];
    for (const r of await this.#o.store.list({ slug, status: 'pending' }))
      if (await this.#decide(r, { status: 'cancelled', by: 'bot-bottle', via: 'system', reason }))
        cancelled.push(r.id);
    // Decided and not applied yet (nobody applying it now): never applied after this.
    for (const r of await this.#o.store.unapplied()) {
      if (r.slug !== slug || this.#inFlight.has(r.id) || !(await this.#claim(r.id))) continue;
      const at = new Date(this.#now()).toISOString();
      if (
        !(await this.#o.store.recordRemediation(
          r.id,
          { ok: false, detail: `not applied: ${reason}` },
          at,
          this.#me,
        ))
      )
        continue;
      this.exchange(slug).writeDecision({
        id: r.id,
        status: 'cancelled',
        reason: `approved, but not applied: ${reason}`,
        decidedAt: r.decidedAt ?? at,
      });
      cancelled.push(r.id);
    }
    return cancelled;
  }

  /**
   * The bottle's requests of a turn (made since `startedAt`), for the turn's
   * provenance record: each with its decision and what the remediation did.
   */
  async auditTurn(slug: string, startedAt: string): Promise<AuditEntry[]> {
    await this.#takeIn(slug, { expire: true });
    return (await this.#o.store.list({ slug }))
      .filter((r) => r.createdAt >= startedAt)
      .map((r) => ({
        id: r.id,
        kind: r.kind,
        tool: r.tool,
        createdAt: r.createdAt,
        justification: r.justification,
        candidateHash: r.candidateHash,
        status: r.status,
        decision: r.decidedBy
          ? {
              by: r.decidedBy,
              via: r.decidedVia,
              at: r.decidedAt!,
              scope: r.scope,
              finalHash: r.finalHash,
              reason: r.reason,
              override: r.override,
            }
          : null,
        remediation: r.remediation
          ? { ok: r.remediation.ok, detail: r.remediation.detail, at: r.remediatedAt }
          : null,
      }));
  }

  /** Whether a bottle waits for the operator now (its watchdog pauses meanwhile). */
  async awaitingOperator(slug: string): Promise<boolean> {
    await this.#takeIn(slug);
    return this.#o.store.hasPending(slug, this.#now());
  }

  async #decide(
    r: SuperviseRequest,
    d: { status: 'rejected' | 'expired' | 'cancelled'; reason: string } & Decider,
  ): Promise<boolean> {
    const at = new Date(this.#now()).toISOString();
    if (!(await this.#o.store.decide(r.id, { ...d, at }))) return false;
    this.exchange(r.slug).writeDecision({
      id: r.id,
      status: d.status,
      reason: d.reason,
      decidedAt: at,
    });
    return true;
  }

  async #get(id: string): Promise<SuperviseRequest> {
    const r = await this.#o.store.get(id);
    if (!r)
      throw new BbError('NOT_FOUND', `no supervise request ${id}: bb supervise list shows them`);
    return r;
  }

  async #pending(id: string): Promise<SuperviseRequest> {
    const r = await this.#get(id);
    if (r.status !== 'pending')
      throw new BbError(
        'CONFLICT',
        `request ${id} is already ${r.status}${r.decidedBy ? ` (by ${r.decidedBy})` : ''}`,
      );
    return r;
  }

  async #view(r: SuperviseRequest): Promise<RequestView> {
    const file = KINDS[r.kind].file;
    return {
      ...r,
      file,
      diff: createTwoFilesPatch(
        `current/${file}`,
        `proposed/${file}`,
        withNewline(r.base),
        withNewline(r.candidate),
        '',
        '',
        { context: 3 },
      ),
      rejections: await this.#o.store.rejectionStreak(r.slug, r.kind),
      beyondCeiling:
        r.status === 'pending' ? beyondCeiling(r.kind, r.base, r.candidate, this.#o.policy) : [],
    };
  }

  /** The proxies' recent denials of the kind this request is about: what triggered it. */
  #evidence(slug: string, kind: ProposalKind, before: string): Evidence[] {
    if (kind === 'dockerfile') return [];
    const want = kind === 'allowlist' ? 'egress' : 'credential';
    const lines = tail(join(this.#o.bottles.dir(slug), 'state', 'egress.jsonl'), 256 * 1024);
    const out: Evidence[] = [];
    for (const line of lines) {
      try {
        const e = JSON.parse(line) as Evidence & { decision?: string };
        if (e.decision !== 'denied' || e.kind !== want || e.time > before) continue;
        out.push({
          time: e.time,
          kind: e.kind,
          host: e.host,
          port: e.port,
          rule: e.rule,
          ...(e.method ? { method: e.method } : {}),
          ...(e.route ? { route: e.route } : {}),
        });
      } catch {}
    }
    return out.slice(-5);
  }
}

const withNewline = (s: string) => (s === '' || s.endsWith('\n') ? s : `${s}\n`);

/** The last `max` bytes of a file, as whole lines. */
function tail(file: string, max: number): string[] {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return [];
  }
  try {
    const size = fstatSync(fd).size;
    const len = Math.min(size, max);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    const lines = buf.toString('utf8').split('\n');
    if (len < size) lines.shift();
    return lines.filter(Boolean);
  } finally {
    closeSync(fd);
  }
}

/** Secret names the proposed routes reference that the current ones do not. */
export function newSecrets(kind: ProposalKind, base: string, proposed: string): string[] {
  if (kind !== 'routes') return [];
  const names = (text: string) => {
    try {
      return (
        JSON.parse(text) as { routes: Array<{ headers: Record<string, string> }> }
      ).routes.flatMap((r) =>
        Object.values(r.headers ?? {}).flatMap((ref) =>
          ref.startsWith('env:') ? [ref.slice(4)] : [],
        ),
      );
    } catch {
      return [];
    }
  };
  const had = new Set(names(base));
  return [...new Set(names(proposed).filter((n) => !had.has(n)))];
}
