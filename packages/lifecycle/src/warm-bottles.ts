import { errorMessage } from '@bb/errors';
import type { BottleRunner } from '@bb/headless';
import type { Capacity } from './capacity';

export interface WarmBottlesOptions {
  capacity: Capacity;
  runner: BottleRunner;
  log: (entry: Record<string, unknown>) => void;
  /** Room came free (a bottle was cooled): whoever waited for it may try again. */
  freed: () => void;
  /** How long after a failed cool it is tried again. */
  retryMs: number;
}

/**
 * The orchestrator's warm bottles: each counted in the memory budget with what
 * it holds, cooled when its window ends, when room is needed (the longest warm
 * first) or at a shutdown. A bottle is cooled once however many ask; a resume or
 * destroy of one being cooled waits for it (`cooling`). One that could not be
 * cooled stays counted and is tried again after `retryMs`.
 */
export class WarmBottles {
  readonly #o: WarmBottlesOptions;
  /** Warm bottles' windows, by slug. */
  readonly #timers = new Map<string, NodeJS.Timeout>();
  /** Warm bottles being cooled, by slug. */
  readonly #cooling = new Map<string, Promise<void>>();
  #closed = false;

  constructor(o: WarmBottlesOptions) {
    this.#o = o;
  }

  /** Count a bottle kept warm until `until`, when it is cooled. */
  hold(slug: string, warm: { until: string; bytes: number }): void {
    this.#o.capacity.holdWarm(slug, warm.bytes);
    clearTimeout(this.#timers.get(slug));
    const t = setTimeout(
      () => void this.cool(slug, 'its warm window ended'),
      Math.max(0, Date.parse(warm.until) - Date.now()),
    );
    t.unref();
    this.#timers.set(slug, t);
    this.#o.log({ msg: 'bottle kept warm', slug, until: warm.until, bytes: warm.bytes });
  }

  /** Stop counting a bottle as warm (it resumes, or goes); whether it was. */
  forget(slug: string): boolean {
    clearTimeout(this.#timers.get(slug));
    this.#timers.delete(slug);
    return this.#o.capacity.releaseWarm(slug);
  }

  /** How many bottles are being cooled (or pooled ones removed) now. */
  get coolingNow(): number {
    return this.#cooling.size;
  }

  /** The cooling of a bottle under way, if any. */
  cooling(slug: string): Promise<void> | undefined {
    return this.#cooling.get(slug);
  }

  /**
   * Cool a warm bottle (its containers go); nothing when it is not warm any more.
   * A bottle of the warm pool (never used) is removed.
   */
  async cool(slug: string, why: string): Promise<void> {
    if (this.#o.capacity.releasePooled(slug)) {
      const dropping = (async () => {
        try {
          if (await this.#o.runner.pool?.drop(slug))
            this.#o.log({ msg: 'pooled bottle removed', slug, why });
        } catch (err) {
          this.#o.log({ msg: 'could not remove a pooled bottle', slug, error: errorMessage(err) });
        }
      })();
      // Counted as a cooling, so the pool makes none meanwhile in the room it frees.
      this.#cooling.set(slug, dropping);
      try {
        await dropping;
      } finally {
        this.#cooling.delete(slug);
      }
      // Its room is for whoever needed it: nobody else is told it came free.
      return;
    }
    const held = this.#o.capacity.warm().find((w) => w.slug === slug)?.bytes ?? 0;
    if (!this.forget(slug)) return;
    const cooling = (async () => {
      try {
        await this.#o.runner.cool?.(slug);
        this.#o.log({ msg: 'warm bottle cooled', slug, why });
      } catch (err) {
        this.#o.log({ msg: 'could not cool a warm bottle', slug, error: errorMessage(err) });
        if (!this.#closed)
          this.hold(slug, {
            until: new Date(Date.now() + this.#o.retryMs).toISOString(),
            bytes: held,
          });
      }
    })();
    this.#cooling.set(slug, cooling);
    try {
      await cooling;
    } finally {
      this.#cooling.delete(slug);
    }
    this.#o.freed();
  }

  /**
   * Cool as many warm bottles (the longest warm first) as `bytes` more need;
   * undefined, at once, when none has to be (so a caller checking room then
   * taking it does not yield in between).
   */
  makeRoom(bytes: number, except?: string): Promise<void> | undefined {
    const slugs = this.#o.capacity.toCool(bytes, except);
    if (slugs.length === 0) return undefined;
    return Promise.all(slugs.map((s) => this.cool(s, 'its memory was needed'))).then(() => {});
  }

  /** Cool every warm bottle (a shutdown: nothing stays paused with nobody to resume it). */
  async coolAll(): Promise<void> {
    await Promise.all(
      this.#o.capacity.warm().map((w) => this.cool(w.slug, 'the orchestrator stops')),
    );
  }

  /** Drop every window's timer (the orchestrator closes; a failed cool is not tried again). */
  close(): void {
    this.#closed = true;
    for (const t of this.#timers.values()) clearTimeout(t);
    this.#timers.clear();
  }
}
