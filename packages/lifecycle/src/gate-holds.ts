/**
 * Fencing of the agents' calls (`BottleRunner.hold`): after each lease renewal, the
 * gates of the bottles this process holds may serve until its new deadline on each
 * issue. Run beside the renewal, never in front of the next one (the hold files may
 * be on a slow shared store), one pass at a time.
 */
import { errorMessage } from '@bb/errors';
import type { BottleRunner } from '@bb/headless';
import type { IssueLeases } from './issue-leases';
import type { Sessions } from './session';

export class GateHolds {
  readonly #leases: IssueLeases;
  readonly #runner: BottleRunner;
  readonly #sessions: Sessions;
  readonly #log: (entry: Record<string, unknown>) => void;
  #pass: Promise<void> | undefined;

  constructor(o: {
    leases: IssueLeases;
    runner: BottleRunner;
    sessions: Sessions;
    log: (entry: Record<string, unknown>) => void;
  }) {
    this.#leases = o.leases;
    this.#runner = o.runner;
    this.#sessions = o.sessions;
    this.#log = o.log;
  }

  /** Renew every held bottle's gate, unless a pass is still running. */
  renew(): void {
    this.#pass ??= this.#renewAll().finally(() => {
      this.#pass = undefined;
    });
  }

  async #renewAll(): Promise<void> {
    const hold = this.#runner.hold?.bind(this.#runner);
    if (!hold || !this.#leases.fenceGates) return;
    for (const key of this.#leases.held) {
      const s = this.#sessions.get(key);
      const until = this.#leases.holdUntil(key);
      if (!s?.slug || !until || (s.state.status !== 'running' && s.state.status !== 'frozen'))
        continue;
      await hold(s.slug, until).catch((err: unknown) =>
        this.#log({
          msg: 'could not renew a gate’s hold',
          key,
          slug: s.slug,
          error: errorMessage(err),
        }),
      );
    }
  }
}
