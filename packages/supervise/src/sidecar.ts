import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import type { z } from 'zod';
import {
  classifyFile,
  type DecisionFile,
  KINDS,
  kindOfTool,
  type ProposalKind,
  ProposeParams,
  type RequestFile,
  sha256,
  TOOL_ARGS,
  type ToolAnswer,
  WaitArgs,
} from './contract';
import { Exchange, newRequestId } from './exchange';
import { validateProposal } from './validate';

/** What a supervise sidecar needs to know of its bottle and its operator. */
export interface SuperviseSidecarOptions {
  slug: string;
  /** The exchange directory it shares with the host. */
  dir: string;
  /** The bottle's current configuration (`routes.json`, `allowlist.json`, `Dockerfile`), read-only. */
  currentConfig: string;
  /** Images a proposed Dockerfile may start from. */
  allowedBases: string[];
  /** @default 24 h */
  ttlMs?: number;
  /** The longest a call waits before answering `pending`. @default 45 s */
  waitMs?: number;
  /** Rejections in a row that start a cool-down. @default 3 */
  coolDownAfter?: number;
  /** @default 10 min */
  coolDownMs?: number;
  /** How often a waiting call looks for the decision besides being woken by it. @default 250 ms */
  pollMs?: number;
  /** Requests that may wait for the operator at once. @default 5 */
  maxPending?: number;
  /** Requests a bottle may make in all. @default 200 */
  maxRequests?: number;
  /**
   * Kinds this bottle's platform cannot apply, each with why (a Kubernetes bottle's
   * image is not rebuilt): asked for, they are refused at once with that reason,
   * and nothing reaches the operator.
   */
  refused?: Partial<Record<ProposalKind, string>>;
  now?: () => number;
}

const FINAL_MESSAGES: Record<DecisionFile['status'], (k: ProposalKind) => string> = {
  approved: (k) =>
    k === 'dockerfile'
      ? 'approved: the image is rebuilt. End your turn now (exit); you continue at once in a container from the new image, with the same workspace, branch and conversation'
      : `approved and applied: ${KINDS[k].applies}. Retry what was refused.`,
  modified: (k) =>
    k === 'dockerfile'
      ? 'approved with changes (see file): the image is rebuilt from it. End your turn now (exit); you continue at once in the new image, with the same workspace, branch and conversation'
      : `approved with changes (see file) and applied: ${KINDS[k].applies}. Retry what was refused.`,
  rejected: () =>
    'rejected by the operator (see reason). Do not ask again for the same change; find another way or signal that you are blocked.',
  expired: () =>
    'expired: nobody decided in time. Carry on without it or signal that you are blocked.',
  cancelled: () => 'cancelled: the request no longer applies.',
};

/**
 * The supervise sidecar's behaviour: check a proposal, record it for the host,
 * and wait (a bounded time) for the operator's decision. It holds no secret and
 * decides nothing; the host decides and writes the answer back.
 */
export class SuperviseSidecar {
  readonly exchange: Exchange;
  readonly #o: Required<Omit<SuperviseSidecarOptions, 'now'>> & { now: () => number };

  constructor(options: SuperviseSidecarOptions) {
    this.#o = {
      ttlMs: 24 * 3600_000,
      waitMs: 45_000,
      coolDownAfter: 3,
      coolDownMs: 10 * 60_000,
      pollMs: 250,
      maxPending: 5,
      maxRequests: 200,
      refused: {},
      now: Date.now,
      ...options,
    };
    this.exchange = new Exchange(options.dir);
  }

  /** The file this bottle runs with now (empty when it has none). */
  current(kind: ProposalKind): string {
    try {
      return readFileSync(join(this.#o.currentConfig, KINDS[kind].file), 'utf8');
    } catch {
      return '';
    }
  }

  /** `propose`: a tool call. Validates, records (or finds the identical request), waits. */
  async propose(params: unknown, signal?: AbortSignal): Promise<ToolAnswer> {
    const p = parse(ProposeParams, params, 'propose');
    const args = parse(TOOL_ARGS[p.tool] as z.ZodType<Record<string, string>>, p.args, p.tool);
    const toolKind = kindOfTool(p.tool)!;
    const file = args[KINDS[toolKind].field]!;
    // Routed by the file it changes, not only by the tool's name.
    const kind = classifyFile(file) ?? toolKind;
    const cannot = this.#o.refused?.[kind];
    if (cannot)
      throw new BbError('UNSUPPORTED', `${KINDS[kind].tool} cannot be applied here: ${cannot}`);
    validateProposal(kind, file, { allowedBases: this.#o.allowedBases });
    const base = this.current(kind);
    const baseHash = sha256(base);
    const candidateHash = sha256(file);
    if (baseHash === candidateHash)
      throw new BbError(
        'INVALID_INPUT',
        `the proposed ${KINDS[kind].file} is the file the bottle already runs with; propose the changed file`,
      );
    const now = this.#o.now();
    // An identical proposal is the same request: its current state, never a second one.
    const same = this.exchange
      .requests()
      .filter(
        (r) => r.kind === kind && r.candidateHash === candidateHash && r.baseHash === baseHash,
      )
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt))
      .at(-1);
    // Waiting or rejected, it is the answer. Approved from this very base means the
    // change was undone since (a turn-scoped approval ended): a new request.
    const sameState = same && this.#state(same);
    if (same && sameState && ['pending', 'rejected'].includes(sameState.status))
      return this.#wait(same, p.wait_ms, signal);
    this.#checkCoolDown(kind, now);
    this.#checkVolume(now);
    const request: RequestFile = {
      id: newRequestId(),
      slug: this.#o.slug,
      kind,
      tool: p.tool,
      file,
      justification: args['justification']!,
      baseHash,
      candidateHash,
      createdAt: new Date(now).toISOString(),
      expiresAt: new Date(now + this.#o.ttlMs).toISOString(),
      ...(kind !== toolKind ? { rerouted: true } : {}),
    };
    this.exchange.ensure();
    this.exchange.writeRequest(request);
    return this.#wait(request, p.wait_ms, signal);
  }

  /** `wait`: the state of a request, waiting up to the bound for a decision. */
  async wait(params: unknown, signal?: AbortSignal): Promise<ToolAnswer> {
    const p = parse(WaitArgs, params, 'supervise_wait');
    const request = this.exchange.request(p.request_id);
    if (!request)
      throw new BbError('NOT_FOUND', `no supervise request ${p.request_id} in this bottle`);
    return this.#wait(request, p.wait_ms, signal);
  }

  /** `config`: the current files, as the bottle sees them under /etc/bot-bottle/current-config. */
  config(): Record<string, string> {
    return Object.fromEntries(
      (Object.keys(KINDS) as ProposalKind[]).map((k) => [KINDS[k].file, this.current(k)]),
    );
  }

  #state(r: RequestFile): ToolAnswer {
    const d = this.exchange.decision(r.id);
    if (d) {
      return {
        status: d.status,
        request_id: r.id,
        kind: r.kind,
        message: FINAL_MESSAGES[d.status](r.kind),
        ...(d.file !== undefined ? { file: d.file } : {}),
        ...(d.reason !== undefined ? { reason: d.reason } : {}),
        ...(d.scope ? { scope: d.scope } : {}),
      };
    }
    if (this.#o.now() >= Date.parse(r.expiresAt))
      return {
        status: 'expired',
        request_id: r.id,
        kind: r.kind,
        message: FINAL_MESSAGES.expired(r.kind),
      };
    return {
      status: 'pending',
      request_id: r.id,
      kind: r.kind,
      message: `waiting for the operator; call supervise_wait with request_id ${r.id} (or run $BB_SUPERVISE wait ${r.id}) to keep waiting. Identical proposals return this same request.`,
    };
  }

  async #wait(
    r: RequestFile,
    waitMs: number | undefined,
    signal?: AbortSignal,
  ): Promise<ToolAnswer> {
    const bound = Math.min(waitMs ?? this.#o.waitMs, this.#o.waitMs);
    // Real time, not the clock that dates requests (tests set that one).
    const deadline = performance.now() + bound;
    for (;;) {
      const state = this.#state(r);
      if (state.status !== 'pending' || performance.now() >= deadline || signal?.aborted)
        return state;
      await this.#nextChange(this.#o.pollMs);
    }
  }

  // A decision is a file the host writes: waiters wake on the directory's change
  // (inotify reaches across the bind mount), and look again every `pollMs` anyway.
  #watcher: FSWatcher | undefined;
  #watchFailed = false;
  readonly #wakers = new Set<() => void>();

  #nextChange(ms: number): Promise<void> {
    if (!this.#watcher && !this.#watchFailed)
      try {
        this.exchange.ensure();
        this.#watcher = watch(this.exchange.decisionsDir, () => {
          for (const wake of this.#wakers) wake();
          this.#wakers.clear();
        });
        this.#watcher.on('error', () => {
          this.#watcher?.close();
          this.#watcher = undefined;
          this.#watchFailed = true;
        });
        this.#watcher.unref();
      } catch {
        this.#watchFailed = true;
      }
    return new Promise<void>((res) => {
      const t = setTimeout(done, this.#watcher ? ms : Math.min(ms, 50));
      function done() {
        clearTimeout(t);
        res();
      }
      this.#wakers.add(done);
    });
  }

  /** Stop watching for decisions (the server is closing). */
  close(): void {
    this.#watcher?.close();
    this.#watcher = undefined;
    for (const wake of this.#wakers) wake();
    this.#wakers.clear();
  }

  /**
   * Requests live on the host's disk: a bottle may have a few waiting at once and
   * a bounded number in all, whatever it tries.
   */
  #checkVolume(now: number): void {
    const all = this.exchange.requests();
    const waiting = all.filter(
      (r) => !this.exchange.decision(r.id) && now < Date.parse(r.expiresAt),
    );
    if (waiting.length >= this.#o.maxPending)
      throw new BbError(
        'CONFLICT',
        `${waiting.length} of your requests already wait for the operator (${waiting.map((r) => r.id).join(', ')}); wait for them (supervise_wait) before asking again`,
      );
    if (all.length >= this.#o.maxRequests)
      throw new BbError(
        'CONFLICT',
        `this bottle has made ${all.length} requests, the most it may; signal that you are blocked instead`,
      );
  }

  /** After `coolDownAfter` rejections in a row of one kind, the agent waits `coolDownMs`. */
  #checkCoolDown(kind: ProposalKind, now: number): void {
    const decided = this.exchange
      .requests()
      .filter((r) => r.kind === kind)
      .map((r) => ({
        r,
        d:
          this.exchange.decision(r.id) ??
          (now >= Date.parse(r.expiresAt)
            ? ({ id: r.id, status: 'expired', decidedAt: r.expiresAt } as DecisionFile)
            : undefined),
      }))
      .filter((x): x is { r: RequestFile; d: DecisionFile } => !!x.d && x.d.status !== 'cancelled')
      .sort((a, b) => a.d.decidedAt.localeCompare(b.d.decidedAt));
    // Refused or left to expire: either way the operator did not give it, and asking
    // again at once is a loop (and an expiry must not buy the agent another TTL of pause).
    let streak = 0;
    for (const x of [...decided].reverse()) {
      if (x.d.status !== 'rejected' && x.d.status !== 'expired') break;
      streak++;
    }
    if (streak < this.#o.coolDownAfter) return;
    const until = Date.parse(decided.at(-1)!.d.decidedAt) + this.#o.coolDownMs;
    if (now < until)
      throw new BbError(
        'CONFLICT',
        `the operator did not grant your last ${streak} ${KINDS[kind].file} proposals: you are looping. Do not propose another before ${new Date(until).toISOString()}; work around it or signal that you are blocked.`,
        { data: { coolDownUntil: new Date(until).toISOString(), rejections: streak } },
      );
  }
}

function parse<T>(schema: z.ZodType<T>, v: unknown, what: string): T {
  const r = schema.safeParse(v);
  if (r.success) return r.data;
  throw new BbError(
    'INVALID_INPUT',
    `${what}: ${r.error.issues.map((i) => `${i.path.map(String).join('.') || '(params)'}: ${i.message}`).join('; ')}`,
  );
}
