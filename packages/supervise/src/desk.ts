import { closeSync, existsSync, fstatSync, openSync, readFileSync, readSync } from 'node:fs';
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
  type RequestStatus,
  sha256,
} from './contract';
import { Exchange, newRequestId } from './exchange';
import type { Policy } from './policy';
import type { Evidence, Remediation, SuperviseRequest, SuperviseStore } from './store';
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
  store: SuperviseStore;
  bottles: SupervisedBottles;
  policy: Policy;
  remediator?: Remediator | undefined;
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
   * Take in every new request of every bottle (with its evidence and findings),
   * and expire what waited past its TTL. Returns what changed.
   */
  sync(only?: string): { ingested: string[]; expired: string[]; bad: string[] } {
    const ingested: string[] = [];
    const bad: string[] = [];
    for (const slug of only ? [only] : this.#o.bottles.slugs()) {
      const ex = this.exchange(slug);
      const seen: string[] = [];
      for (const id of ex.requestIds()) {
        // Known requests are not read again: a sync costs a directory listing.
        if (this.#o.store.get(id)) continue;
        const r = ex.request(id);
        if (!r || r.slug !== slug) {
          seen.push(`${id}.json`);
          continue;
        }
        const base = this.current(slug, r.kind);
        // The sidecar says which file it started from; the host checks it against its own.
        const baseText = sha256(base) === r.baseHash ? base : '';
        if (
          this.#o.store.ingest(r, {
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
    for (const r of this.#o.store.expired(this.#now())) {
      if (
        this.#decide(r, {
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

  list(filter: { status?: RequestStatus; slug?: string } = {}): RequestView[] {
    this.sync();
    return this.#o.store.list(filter).map((r) => this.#view(r));
  }

  show(id: string): RequestView {
    this.sync();
    return this.#view(this.#get(id));
  }

  /**
   * Approve a pending request (with `edited`, the operator's own version: `modified`).
   * `expect` binds the decision to the hashes of the files the operator was shown:
   * if either changed since, it must be reviewed again.
   */
  async approve(id: string, d: Decision): Promise<DecisionOutcome> {
    this.sync();
    const r = this.#pending(id);
    // One approval of a bottle's proxies (allowlist and routes reload together) or image at
    // a time: the next is checked against what the one before it applied (two approved from
    // the same base, the second is a CONFLICT) and never reloads over it.
    const key = `${r.slug}\0${r.kind === 'dockerfile' ? 'image' : 'proxies'}`;
    const run = (this.#applying.get(key) ?? Promise.resolve())
      .catch(() => {})
      .then(() => this.#approve(id, d));
    this.#applying.set(key, run);
    try {
      return await run;
    } finally {
      if (this.#applying.get(key) === run) this.#applying.delete(key);
    }
  }

  readonly #applying = new Map<string, Promise<DecisionOutcome>>();

  async #approve(id: string, d: Decision): Promise<DecisionOutcome> {
    this.sync();
    const r = this.#pending(id);
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
    const base = this.current(r.slug, r.kind);
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
    if (!this.#o.remediator)
      throw new BbError(
        'INVALID_INPUT',
        'this desk cannot apply decisions (no remediator): nothing was decided',
      );
    if (r.kind === 'dockerfile' && !this.#o.remediator.rebuild)
      throw new BbError('INVALID_INPUT', 'this desk cannot rebuild images: nothing was decided');
    const decided = this.#o.store.decide(id, {
      status: modified ? 'modified' : 'approved',
      by: d.by,
      via: d.via,
      at: new Date(this.#now()).toISOString(),
      scope,
      final: { text: final, hash: sha256(final) },
      override: !!d.override && beyond.length > 0,
    });
    if (!decided)
      throw new BbError('CONFLICT', `request ${id} was decided meanwhile: ${this.#get(id).status}`);
    // The remediation first: the agent hears `approved` only once the change is in place.
    let remediation: Remediation;
    try {
      remediation =
        r.kind === 'dockerfile'
          ? await this.#o.remediator.rebuild!(
              r.slug,
              final,
              id,
              `the operator ${modified ? 'approved with changes' : 'approved'} your capability-block request ${id}`,
            )
          : await this.#o.remediator.reloadProxies(r.slug, r.kind, final, scope);
    } catch (err) {
      remediation = { ok: false, detail: (err as Error).message };
    }
    this.#o.store.recordRemediation(id, remediation, new Date(this.#now()).toISOString());
    const after = this.#get(id);
    if (remediation.ok)
      this.exchange(r.slug).writeDecision({
        id,
        status: after.status as 'approved' | 'modified',
        scope,
        file: final,
        decidedAt: after.decidedAt!,
      });
    if (remediation.ok && r.kind === 'dockerfile') await this.#o.remediator.afterRebuild?.(r.slug);
    if (!remediation.ok)
      this.exchange(r.slug).writeDecision({
        id,
        status: 'cancelled',
        reason: `approved, but applying it failed: ${remediation.detail}`,
        decidedAt: after.decidedAt!,
      });
    return { request: after, remediation };
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
    this.#o.store.ingest(
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
  reject(id: string, reason: string, who: Decider): SuperviseRequest {
    if (!reason.trim())
      throw new BbError('INVALID_INPUT', 'a rejection needs a reason: the agent is told it');
    this.sync();
    const r = this.#pending(id);
    if (!this.#decide(r, { status: 'rejected', ...who, reason }))
      throw new BbError('CONFLICT', `request ${id} was decided meanwhile: ${this.#get(id).status}`);
    return this.#get(id);
  }

  /** Cancel a pending request (the bottle went away, or the operator withdrew it). */
  cancel(id: string, who: Decider, reason = 'cancelled by the operator'): SuperviseRequest {
    this.sync();
    const r = this.#pending(id);
    this.#decide(r, { status: 'cancelled', ...who, reason });
    return this.#get(id);
  }

  /** Cancel every pending request of a bottle (destroyed, or its turn ended for good). */
  cancelAll(slug: string, reason: string): string[] {
    this.sync();
    return this.#o.store
      .list({ slug, status: 'pending' })
      .filter((r) =>
        this.#decide(r, { status: 'cancelled', by: 'bot-bottle', via: 'system', reason }),
      )
      .map((r) => r.id);
  }

  /**
   * The bottle's requests of a turn (made since `startedAt`), for the turn's
   * provenance record: each with its decision and what the remediation did.
   */
  auditTurn(slug: string, startedAt: string): AuditEntry[] {
    this.sync(slug);
    return this.#o.store
      .list({ slug })
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
  awaitingOperator(slug: string): boolean {
    this.sync(slug);
    return this.#o.store.hasPending(slug, this.#now());
  }

  #decide(
    r: SuperviseRequest,
    d: { status: 'rejected' | 'expired' | 'cancelled'; reason: string } & Decider,
  ): boolean {
    const at = new Date(this.#now()).toISOString();
    if (!this.#o.store.decide(r.id, { ...d, at })) return false;
    this.exchange(r.slug).writeDecision({
      id: r.id,
      status: d.status,
      reason: d.reason,
      decidedAt: at,
    });
    return true;
  }

  #get(id: string): SuperviseRequest {
    const r = this.#o.store.get(id);
    if (!r)
      throw new BbError('NOT_FOUND', `no supervise request ${id}: bb supervise list shows them`);
    return r;
  }

  #pending(id: string): SuperviseRequest {
    const r = this.#get(id);
    if (r.status !== 'pending')
      throw new BbError(
        'CONFLICT',
        `request ${id} is already ${r.status}${r.decidedBy ? ` (by ${r.decidedBy})` : ''}`,
      );
    return r;
  }

  #view(r: SuperviseRequest): RequestView {
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
      rejections: this.#o.store.rejectionStreak(r.slug, r.kind),
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
