import { errorMessage, isBbError } from '@bb/errors';
import type { BottleRunner } from '@bb/headless';
import { GATE_ROLE, type TurnOutcome } from '@bb/headless';
import { LABEL } from '@bb/names';
import { drainTurn, readTurnLog } from './turn-log';

/** What a running turn tells the orchestrator, each on its issue's queue. */
export type TurnReport =
  | { kind: 'pr_learned'; slug: string; pr: number }
  | { kind: 'done_signalled'; slug: string }
  | { kind: 'gate_lost'; slug: string; detail: string }
  | { kind: 'checked_in'; slug: string; at: string }
  | { kind: 'turn_ended'; slug: string; outcome: TurnOutcome };

export interface TurnMonitorOptions {
  runner: BottleRunner;
  slug: string;
  report: (r: TurnReport) => void;
  /** How often the sidecar's queue is read. @default 500 */
  pollMs?: number;
  /** How often the sidecar's socket and container are looked at. @default 3000 */
  checkMs?: number;
  /** When the turn started (ms). @default now */
  startedAt?: number;
  log?: (entry: Record<string, unknown>) => void;
}

/**
 * Watches one running turn without holding anything up: waits for the agent's
 * exit in the background, reads the sidecar's queue as it goes (PRs opened,
 * the done signal, check-ins: into the bottle's turn log, durably), notices a
 * sidecar that died or a socket that vanished within seconds, and can stop the
 * agent after a grace. Everything it learns is reported, never acted on here.
 */
export class TurnMonitor {
  readonly slug: string;
  readonly startedAt: number;
  readonly #o: TurnMonitorOptions;
  #poll: NodeJS.Timeout | undefined;
  #check: NodeJS.Timeout | undefined;
  #stopTimer: NodeJS.Timeout | undefined;
  #draining: Promise<unknown> = Promise.resolve();
  #ended = false;
  /** Closed by its owner (the orchestrator stops): the turn's end is not reported. */
  #closed = false;
  #gateReported = false;

  constructor(options: TurnMonitorOptions) {
    this.#o = options;
    this.slug = options.slug;
    this.startedAt = options.startedAt ?? Date.now();
    this.#lastRead = this.startedAt;
  }

  /**
   * The sidecar's last check-in (ms) as the turn log says, or the turn's start.
   * When the log cannot be read, the last one read (never "now": silence is not hidden).
   */
  async lastCheckin(): Promise<number> {
    try {
      const log = await readTurnLog(this.#o.runner.storage, this.slug);
      const at = Date.parse(log.lastCheckinAt ?? '');
      this.#lastRead = Number.isNaN(at) ? this.startedAt : Math.max(at, this.startedAt);
    } catch (err) {
      this.#o.log?.({
        msg: 'could not read the turn log',
        slug: this.slug,
        error: errorMessage(err),
      });
    }
    return this.#lastRead;
  }

  #lastRead: number;

  get ended(): boolean {
    return this.#ended;
  }

  start(): this {
    this.#poll = setInterval(() => void this.#drain(), this.#o.pollMs ?? 500);
    this.#check = setInterval(() => void this.#checkGate(), this.#o.checkMs ?? 3000);
    this.#poll.unref();
    this.#check.unref();
    void this.#finish().then(async (outcome) => {
      if (this.#closed) return;
      this.#stopTimers();
      // What the sidecar said last is in the turn log before the turn's end is reported.
      await this.#drain();
      if (!this.#closed) this.#o.report({ kind: 'turn_ended', slug: this.slug, outcome });
    });
    return this;
  }

  /**
   * The turn's end. An engine that does not answer (restarting, a dropped
   * connection) is asked again, with a growing pause, for as long as the
   * monitor runs: the turn is not over because its engine blinked.
   */
  async #finish(): Promise<TurnOutcome> {
    let pause = 500;
    for (;;) {
      try {
        return await this.#o.runner.finishTurn(this.slug);
      } catch (err) {
        if (this.#closed || !isBbError(err, 'BACKEND_UNAVAILABLE')) {
          if (!this.#closed)
            this.#o.log?.({
              msg: 'the turn could not be finished',
              slug: this.slug,
              error: errorMessage(err),
            });
          return {
            slug: this.slug,
            exitCode: -1,
            ok: false,
            sessionId: undefined,
            error: `the turn could not be finished: ${errorMessage(err)}`,
            output: '',
          };
        }
        this.#o.log?.({
          msg: 'the engine does not answer; waiting for the turn again',
          slug: this.slug,
          error: errorMessage(err),
          retryInMs: pause,
        });
        await new Promise((r) => setTimeout(r, pause));
        pause = Math.min(pause * 2, 30_000);
      }
    }
  }

  /** Stop the agent after `ms` (its turn then ends the ordinary way). */
  stopAfter(ms: number): void {
    if (this.#ended) return;
    clearTimeout(this.#stopTimer);
    this.#stopTimer = setTimeout(() => {
      void this.#o.runner.stopAgent(this.slug, 5000).catch((err) =>
        this.#o.log?.({
          msg: 'could not stop the agent',
          slug: this.slug,
          error: errorMessage(err),
        }),
      );
    }, ms);
    this.#stopTimer.unref();
  }

  /** Stop watching: nothing more is reported (the orchestrator stops, or took the turn's end). */
  close(): void {
    this.#closed = true;
    this.#stopTimers();
  }

  #stopTimers(): void {
    this.#ended = true;
    clearInterval(this.#poll);
    clearInterval(this.#check);
    clearTimeout(this.#stopTimer);
  }

  #drain(): Promise<unknown> {
    // One drain at a time, in order.
    this.#draining = this.#draining.then(async () => {
      try {
        if (this.#closed) return;
        const news = await drainTurn(this.#o.runner.storage, this.slug);
        for (const pr of news.prs) this.#o.report({ kind: 'pr_learned', slug: this.slug, pr });
        if (news.done) this.#o.report({ kind: 'done_signalled', slug: this.slug });
        if (news.checkedIn && news.lastCheckinAt)
          this.#o.report({ kind: 'checked_in', slug: this.slug, at: news.lastCheckinAt });
      } catch {
        // the bottle's directory went away (destroyed): the turn's end says the rest
      }
    });
    return this.#draining;
  }

  async #checkGate(): Promise<void> {
    if (this.#ended || this.#gateReported) return;
    const meta = await this.#o.runner.storage.meta(this.slug);
    if (!meta?.forge) return;
    let detail: string | undefined;
    try {
      const cs = await this.#o.runner.containers(this.slug);
      // An agent that exited is ending its turn the ordinary way, and the freeze that
      // follows stops the gate: only a gate lost under a working agent counts.
      const agent = cs.find((c) => c.labels[LABEL.role] === 'agent');
      if (agent?.state !== 'running') return;
      const gate = cs.find((c) => c.labels[LABEL.role] === GATE_ROLE);
      if (!gate) detail = "the gate container (the forge sidecar's) was removed";
      else if (gate.state === 'exited')
        detail = `the gate (the forge sidecar's) exited (${gate.exitCode ?? 'no code'})`;
      else if (
        gate.state === 'running' &&
        (await this.#o.runner.storage.gateListening?.(this.slug)) === false
      )
        detail = 'the forge sidecar socket was removed';
    } catch {
      return; // the engine does not answer now; the next look decides
    }
    if (detail && !this.#ended) {
      this.#gateReported = true;
      this.#o.report({ kind: 'gate_lost', slug: this.slug, detail });
    }
  }
}
