import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import {
  AGENT_LABEL_PREFIX,
  BOTTLE_BRANCH,
  commentCreatedKey,
  evaluateTargeting,
  type Forge,
  type ForgeEvent,
} from '@bb/forge';
import { FORGE_PROMPT_OVERLAY } from '@bb/forge-sidecar';
import {
  type Backend,
  bottleDir,
  destroy,
  HOME_LABEL,
  homeLabel,
  launch,
  readMeta,
  reattach,
  resume,
  type TurnOutcome,
} from '@bb/headless';
import type { DeliveryLedger, ForgeState, ForgeStateStore } from '@bb/state';
import { saveBottleRow } from './bottle-row';
import {
  INITIAL,
  type LifecycleInput,
  type LifecycleState,
  transition,
  type WatchdogReason,
} from './machine';
import { type ProvenanceOptions, recordTurn } from './record-turn';
import { SerialQueue } from './serial-queue';

export interface OrchestratorOptions {
  /** The forge for a repository, authenticated as the bot. */
  forgeFor: (owner: string, repo: string) => Forge;
  /** The bot's token (given to each bottle's sidecar only) and its login. */
  token: string;
  botLogin: string;
  /** Org whose assigned members launch agents. @default 'bot-bottle' */
  org?: string;
  apiUrl: string;
  cloneUrl: (owner: string, repo: string) => string;
  store: ForgeStateStore;
  /**
   * Where the reconcile sweep records the comments it acts on, under the same
   * keys as the webhook handler, so a comment is acted on once whichever path
   * saw it first. @default `store`, when it is also a ledger
   */
  ledger?: DeliveryLedger;
  backend: Backend;
  provenance: ProvenanceOptions;
  env: Record<string, string | undefined>;
  concurrency?: number;
  /** A running agent with no check-in for this long is stopped. @default 30 min */
  watchdogTimeoutMs?: number;
  /** How often the watchdog looks. @default 60 s */
  watchdogIntervalMs?: number;
  log?: (entry: Record<string, unknown>) => void;
}

/** The label on every container the orchestrator launches. */
export const MANAGED_LABEL = { 'bb.managed-by': 'orchestrator' } as const;

/** What the orchestrator found and did when it reconciled with the backend. */
export interface ReconcileReport {
  /** Bottles whose turn was in progress: their containers are watched again. */
  reattached: string[];
  /** Containers of ours that no state row owns, removed (by slug). */
  orphansRemoved: string[];
}

/** A unit of work on an issue's queue: a forge event, or finishing a turn begun before a restart. */
type Work =
  | ForgeEvent
  | {
      kind: 'reattach';
      key: string;
      owner: string;
      repo: string;
      issue: number;
      occurredAt: string;
    };

interface Bottle {
  slug: string;
  owner: string;
  repo: string;
  issue: number;
  agent: string;
  state: LifecycleState;
}

/**
 * Composes the packages into the forge-driven loop: events in (from the webhook
 * handler), bottles out. Each issue's events run one at a time, in the forge's
 * order; the state machine decides, this class carries out.
 */
export class Orchestrator {
  readonly #o: OrchestratorOptions;
  readonly #bottles = new Map<string, Bottle>();
  readonly queue: SerialQueue<Work>;
  /** Slugs whose turn is running, with when it started. */
  readonly #turns = new Map<string, number>();
  readonly #watchdogFired = new Map<string, { reason: WatchdogReason; detail: string }>();
  #watchdogTimer: NodeJS.Timeout | undefined;

  constructor(options: OrchestratorOptions) {
    this.#o = options;
    this.queue = new SerialQueue<Work>(
      options.concurrency ?? 4,
      (_key, event) => this.#handle(event),
      (key, event, err) =>
        this.#log({ msg: 'event failed', key, event: event.kind, error: errorMessage(err) }),
      (a, b) => a.occurredAt.localeCompare(b.occurredAt),
    );
    // Bottles remembered across restarts. A running one's turn is finished by `reconcile`.
    for (const row of options.store.all()) {
      if (row.status === 'destroyed') continue;
      this.#bottles.set(this.#key(row.owner, row.repo, row.issueNumber), {
        slug: row.slug,
        owner: row.owner,
        repo: row.repo,
        issue: row.issueNumber,
        agent: row.agentName,
        state: {
          status: row.status,
          prs: row.prNumber ? [row.prNumber] : [],
          pending: [],
        },
      });
    }
  }

  get #ledger(): DeliveryLedger | undefined {
    const store = this.#o.store as Partial<DeliveryLedger>;
    return (
      this.#o.ledger ??
      (typeof store.recordDelivery === 'function' ? (store as DeliveryLedger) : undefined)
    );
  }

  /**
   * Match the backend with the state rows, after a start or a crash. Containers
   * this orchestrator launched (under this `BB_HOME`) that no live row owns are
   * removed; a bottle whose turn was in progress is watched again: its agent's
   * end is awaited and recorded as usual, or, when its agent container is gone,
   * it is frozen with `watchdogFired: vanished`. The watchdog resumes from the
   * last check-in. Call it once at start, before events arrive.
   */
  async reconcile(): Promise<ReconcileReport> {
    const report: ReconcileReport = { reattached: [], orphansRemoved: [] };
    const live = new Set(
      this.#o.store
        .all()
        .filter((r) => r.status !== 'destroyed')
        .map((r) => r.slug),
    );
    const ours = await this.#o.backend.list({
      ...MANAGED_LABEL,
      [HOME_LABEL]: homeLabel(this.#o.env),
    });
    const orphans = new Set(
      ours.map((c) => c.labels['bb.slug']).filter((s): s is string => !!s && !live.has(s)),
    );
    for (const slug of orphans) {
      await destroy(slug, { backend: this.#o.backend, env: this.#o.env });
      report.orphansRemoved.push(slug);
      this.#log({ msg: 'orphan bottle removed', slug });
    }
    for (const row of this.#o.store.all()) {
      if (row.status !== 'running') continue;
      const key = this.#key(row.owner, row.repo, row.issueNumber);
      this.#turns.set(row.slug, Date.parse(row.lastCheckinAt) || Date.now());
      report.reattached.push(row.slug);
      this.#log({ msg: 'reattaching to a running bottle', key, slug: row.slug });
      this.queue.push(key, {
        kind: 'reattach',
        key: `reattach:${row.slug}`,
        owner: row.owner,
        repo: row.repo,
        issue: row.issueNumber,
        // Before any event that arrives for the issue.
        occurredAt: '',
      });
    }
    return report;
  }

  /**
   * One pass over the forge's REST API for what webhooks never delivered (Gitea
   * does not retry): open issues labelled for an agent that have no bottle, and
   * frozen bottles whose PR closed or got human comments. What it finds goes
   * through the same queue and state machine as webhook events, so a change
   * seen both ways is acted on once. Looks at `repos` and every repository
   * that has a bottle. Returns how many events it enqueued.
   */
  async sweep(repos: Array<{ owner: string; repo: string }> = []): Promise<number> {
    const rows = this.#o.store.all();
    const targets = new Map<string, { owner: string; repo: string }>();
    for (const r of [...repos, ...rows.map((x) => ({ owner: x.owner, repo: x.repo }))])
      targets.set(`${r.owner}/${r.repo}`, { owner: r.owner, repo: r.repo });
    let n = 0;
    const push = (e: ForgeEvent) => {
      n++;
      this.enqueue(e);
    };
    for (const { owner, repo } of targets.values()) {
      const forge = this.#o.forgeFor(owner, repo);
      for (const issue of await forge.listOpenIssues()) {
        if (!issue.labels.some((l) => l.name.startsWith(AGENT_LABEL_PREFIX))) continue;
        if (this.#o.store.get(owner, repo, issue.number)) continue;
        if (this.#bottles.has(this.#key(owner, repo, issue.number))) continue;
        push({
          kind: 'issue_targeting_changed',
          action: 'edited',
          key: `sweep:${owner}/${repo}#${issue.number}:${issue.updatedAt}`,
          deliveryId: undefined,
          owner,
          repo,
          sender: issue.author,
          occurredAt: issue.updatedAt,
          issue: {
            number: issue.number,
            title: issue.title,
            labels: issue.labels.map((l) => l.name),
            assignees: issue.assignees.map((a) => a.login),
            state: issue.state,
          },
        });
      }
    }
    for (const row of rows) {
      if (row.status !== 'frozen' || !row.prNumber) continue;
      const forge = this.#o.forgeFor(row.owner, row.repo);
      const pr = await forge.readPr(row.prNumber);
      const ref = {
        number: pr.number,
        title: pr.title,
        body: pr.body,
        state: pr.state,
        head: pr.head.ref,
        headSha: pr.head.sha,
        base: pr.base.ref,
        author: pr.author.login,
      };
      const base = { deliveryId: undefined, owner: row.owner, repo: row.repo };
      if (pr.state === 'closed') {
        push({
          ...base,
          kind: 'pr_closed',
          key: `sweep:${row.owner}/${row.repo}!${pr.number}:closed`,
          sender: pr.author,
          occurredAt: pr.closedAt ?? pr.updatedAt,
          pr: ref,
          merged: pr.merged,
          mergeCommitSha: pr.mergeCommitSha,
        });
        continue;
      }
      const since = Date.parse(row.createdAt);
      for (const c of await forge.readComments(pr.number)) {
        if (c.author.login === this.#o.botLogin || Date.parse(c.createdAt) < since) continue;
        const key = commentCreatedKey(forge.kind, row.owner, row.repo, c.id);
        if (this.#ledger && !this.#ledger.recordDelivery(key, { event: 'sweep' })) continue;
        push({
          ...base,
          kind: 'comment_created',
          key,
          sender: c.author,
          occurredAt: c.createdAt,
          on: 'pr',
          number: pr.number,
          comment: { id: c.id, author: c.author.login, body: c.body },
        });
      }
    }
    if (n > 0) this.#log({ msg: 'sweep found missed changes', events: n });
    return n;
  }

  /** Hand an event over (returns at once). */
  enqueue(event: Work): void {
    const issue = this.#issueOf(event);
    if (issue === undefined) {
      this.#log({ msg: 'event not about a bottle', kind: event.kind, key: event.key });
      return;
    }
    this.queue.push(this.#key(event.owner, event.repo, issue), event);
  }

  idle(): Promise<void> {
    return this.queue.idle();
  }

  #key(owner: string, repo: string, issue: number): string {
    return `${owner}/${repo}#${issue}`;
  }

  #log(entry: Record<string, unknown>): void {
    this.#o.log?.(entry);
  }

  /** The issue an event belongs to: its own number, or the issue whose bottle owns the PR. */
  #issueOf(event: Work): number | undefined {
    switch (event.kind) {
      case 'reattach':
        return event.issue;
      case 'issue_targeting_changed':
      case 'issue_closed':
        return event.issue.number;
      case 'comment_created': {
        if (event.on === 'issue') return event.number;
        return this.#issueForPr(event.owner, event.repo, event.number);
      }
      case 'pr_opened': {
        const m = BOTTLE_BRANCH.exec(event.pr.head);
        return m ? Number(m[1]) : this.#issueForPr(event.owner, event.repo, event.pr.number);
      }
      default:
        return this.#issueForPr(event.owner, event.repo, event.pr.number);
    }
  }

  #issueForPr(owner: string, repo: string, pr: number): number | undefined {
    for (const b of this.#bottles.values())
      if (b.owner === owner && b.repo === repo && b.state.prs.includes(pr)) return b.issue;
    return this.#o.store
      .all()
      .find((r) => r.owner === owner && r.repo === repo && r.prNumber === pr)?.issueNumber;
  }

  async #handle(event: Work): Promise<void> {
    const issue = this.#issueOf(event)!;
    const key = this.#key(event.owner, event.repo, issue);
    let input: LifecycleInput | undefined;
    let agent: string | undefined;
    switch (event.kind) {
      case 'reattach': {
        const bottle = this.#bottles.get(key);
        if (bottle?.state.status === 'running') await this.#reattach(key, bottle);
        return;
      }
      case 'issue_targeting_changed': {
        const forge = this.#o.forgeFor(event.owner, event.repo);
        const t = await evaluateTargeting(
          { labels: event.issue.labels, assignees: event.issue.assignees },
          {
            org: this.#o.org ?? 'bot-bottle',
            isMember: (org, user) => forge.isOrgMember(org, user).catch(() => undefined),
          },
        );
        this.#log({ msg: 'targeting', key, targeted: t.targeted, reasons: t.reasons });
        if (!t.targeted || event.issue.state !== 'open') return;
        input = { type: 'targeted' };
        agent = t.agent;
        break;
      }
      case 'issue_closed':
        input = { type: 'issue_closed' };
        break;
      case 'pr_opened':
        input = { type: 'pr_opened', pr: event.pr.number, author: event.pr.author };
        break;
      case 'comment_created':
        if (event.on !== 'pr') return;
        input = {
          type: 'pr_comment',
          pr: event.number,
          author: event.comment.author,
          body: event.comment.body,
        };
        break;
      case 'pr_synchronized':
        input = { type: 'pr_synchronized', pr: event.pr.number, author: event.sender.login };
        break;
      case 'pr_closed':
        input = { type: 'pr_closed', pr: event.pr.number, merged: event.merged };
        break;
      default:
        return;
    }
    await this.#apply(key, event.owner, event.repo, issue, input, agent);
  }

  async #apply(
    key: string,
    owner: string,
    repo: string,
    issue: number,
    input: LifecycleInput,
    agent?: string,
  ): Promise<void> {
    const bottle = this.#bottles.get(key) ?? {
      slug: '',
      owner,
      repo,
      issue,
      agent: agent ?? '',
      state: INITIAL,
    };
    const { state, actions } = transition(bottle.state, input, { botLogin: this.#o.botLogin });
    bottle.state = state;
    this.#bottles.set(key, bottle);
    for (const action of actions) {
      if (action.type === 'log') {
        this.#log({ msg: action.message, key });
      } else if (action.type === 'launch') {
        bottle.agent = agent ?? bottle.agent;
        bottle.slug = `${bottle.agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
        const forge = this.#o.forgeFor(owner, repo);
        const read = await forge.readIssue(issue);
        const prompt = `${FORGE_PROMPT_OVERLAY}\nYour issue is #${issue} of ${owner}/${repo}: ${read.title}\n\n${read.body}`;
        this.#save(bottle, 'running');
        const started = new Date().toISOString();
        this.#turns.set(bottle.slug, Date.now());
        let out: TurnOutcome;
        try {
          out = await launch({
            agent: bottle.agent,
            slug: bottle.slug,
            prompt,
            backend: this.#o.backend,
            env: this.#o.env,
            labels: { ...MANAGED_LABEL },
            forge: {
              apiUrl: this.#o.apiUrl,
              token: this.#o.token,
              owner,
              repo,
              issue,
              cloneUrl: this.#o.cloneUrl(owner, repo),
            },
          });
        } catch (err) {
          // launch leaves nothing behind on failure; neither does the orchestrator,
          // so a later targeting event can try again.
          this.#turns.delete(bottle.slug);
          this.#watchdogFired.delete(bottle.slug);
          bottle.state = INITIAL;
          this.#o.store.delete(owner, repo, issue);
          this.#log({ msg: 'launch failed', key, slug: bottle.slug, error: errorMessage(err) });
          return;
        }
        await this.#afterTurn(key, bottle, out, started);
      } else if (action.type === 'resume') {
        this.#save(bottle, 'running');
        const started = new Date().toISOString();
        this.#turns.set(bottle.slug, Date.now());
        const out = await resume({
          slug: bottle.slug,
          prompt: action.prompt,
          forgeToken: this.#o.token,
          pr: bottle.state.prs.at(-1),
          backend: this.#o.backend,
          env: this.#o.env,
        });
        await this.#afterTurn(key, bottle, out, started);
      } else if (action.type === 'freeze') {
        this.#save(bottle, 'frozen');
      } else if (action.type === 'destroy') {
        await destroy(bottle.slug, { backend: this.#o.backend, env: this.#o.env });
        this.#save(bottle, 'destroyed');
        this.#log({ msg: 'bottle destroyed', key, slug: bottle.slug });
      }
    }
  }

  /** Finish a turn begun before a restart. */
  async #reattach(key: string, bottle: Bottle): Promise<void> {
    const opts = { backend: this.#o.backend, env: this.#o.env };
    const meta = readMeta(bottle.slug, this.#o.env);
    const started = meta?.current?.startedAt ?? new Date().toISOString();
    let out: TurnOutcome;
    if (meta?.status === 'running') {
      out = await reattach(bottle.slug, opts);
    } else {
      // Killed after the bottle froze but before the row said so: the turn is over.
      const last = meta?.turns.at(-1);
      out = {
        slug: bottle.slug,
        exitCode: last?.exitCode ?? -1,
        ok: last?.ok ?? false,
        sessionId: meta?.sessionId ?? undefined,
        output: '',
        ...(meta ? {} : { vanished: true }),
      };
    }
    if (out.vanished)
      this.#watchdogFired.set(bottle.slug, {
        reason: 'vanished',
        detail: 'the agent container was gone when the orchestrator reattached after a restart',
      });
    await this.#afterTurn(key, bottle, out, started);
  }

  /** After a turn: learn the PRs and the done signal from the bottle's queue, record provenance, freeze. */
  async #afterTurn(
    key: string,
    bottle: Bottle,
    out: TurnOutcome,
    startedAt: string,
  ): Promise<void> {
    this.#turns.delete(bottle.slug);
    const fired = this.#watchdogFired.get(bottle.slug);
    this.#watchdogFired.delete(bottle.slug);
    const { done, prs } = await recordTurn({
      slug: bottle.slug,
      agent: bottle.agent,
      env: this.#o.env,
      forge: { owner: bottle.owner, repo: bottle.repo, issue: bottle.issue },
      prs: bottle.state.prs,
      outcome: out,
      startedAt,
      fired,
      provenance: this.#o.provenance,
    });
    bottle.state = { ...bottle.state, prs };
    this.#save(bottle, 'frozen');
    const next: LifecycleInput =
      done && !fired
        ? { type: 'agent_stopped' }
        : { type: 'watchdog', reason: fired?.reason ?? 'exit_without_signal' };
    await this.#apply(key, bottle.owner, bottle.repo, bottle.issue, next);
  }

  /** Start the watchdog (and stop it with `stopWatchdog`). */
  startWatchdog(): void {
    this.#watchdogTimer ??= setInterval(() => {
      void this.checkWatchdog().catch((err) =>
        this.#log({ msg: 'watchdog failed', error: errorMessage(err) }),
      );
    }, this.#o.watchdogIntervalMs ?? 60_000);
    this.#watchdogTimer.unref();
  }

  stopWatchdog(): void {
    if (this.#watchdogTimer) clearInterval(this.#watchdogTimer);
    this.#watchdogTimer = undefined;
  }

  /**
   * One watchdog pass: a running agent whose sidecar died, or that has not
   * checked in for the timeout, is stopped. Its turn then ends the ordinary way
   * (frozen, with provenance), and the record says why the watchdog fired.
   */
  async checkWatchdog(now = Date.now()): Promise<void> {
    const timeout = this.#o.watchdogTimeoutMs ?? 30 * 60_000;
    for (const [slug, startedAt] of this.#turns) {
      if (this.#watchdogFired.has(slug)) continue;
      const containers = await this.#o.backend.list({ 'bb.slug': slug });
      const agentC = containers.find(
        (c) => c.labels['bb.role'] === 'agent' && c.state === 'running',
      );
      if (!agentC) continue;
      const sidecar = containers.find((c) => c.labels['bb.role'] === 'sidecar');
      let fired: { reason: WatchdogReason; detail: string } | undefined;
      if (sidecar && sidecar.state === 'exited') {
        fired = {
          reason: 'sidecar_death',
          detail: `the forge sidecar exited (${sidecar.exitCode ?? 'no code'})`,
        };
      } else {
        const last = Math.max(startedAt, this.#lastCheckin(slug));
        if (now - last > timeout)
          fired = {
            reason: 'silence',
            detail: `no check-in for ${Math.round((now - last) / 1000)} s (limit ${Math.round(timeout / 1000)} s)`,
          };
      }
      if (!fired) continue;
      this.#watchdogFired.set(slug, fired);
      this.#log({ msg: 'watchdog fired', slug, ...fired });
      await this.#o.backend.stop(agentC.id, 2000);
    }
  }

  /** The newest check-in in a bottle's queue (ms), or 0. */
  #lastCheckin(slug: string): number {
    const q = join(bottleDir(slug, this.#o.env), 'queue');
    let last = 0;
    if (!existsSync(q)) return last;
    for (const f of readdirSync(q)) {
      if (!f.endsWith('.json')) continue;
      try {
        const e = JSON.parse(readFileSync(join(q, f), 'utf8')) as { time?: string };
        last = Math.max(last, Date.parse(e.time ?? '') || 0);
      } catch {
        // a file being written; the next pass reads it
      }
    }
    return last;
  }

  #save(bottle: Bottle, status: ForgeState['status']): void {
    saveBottleRow(
      this.#o.store,
      {
        owner: bottle.owner,
        repo: bottle.repo,
        issue: bottle.issue,
        slug: bottle.slug,
        agent: bottle.agent,
        backendName: this.#o.backend.name,
        botLogin: this.#o.botLogin,
        prNumber: bottle.state.prs.at(-1) ?? null,
        status,
      },
      this.#o.env,
    );
  }
}
