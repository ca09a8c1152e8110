/**
 * How much the orchestrator runs at once, in two separate limits: start-up
 * work (clone, create, start: disk and CPU heavy, short) and running bottles,
 * counted in memory (each bottle's limit) against a budget. Work that does not
 * fit waits here, in order, and the caller is told when to try again.
 */
export interface CapacityOptions {
  /** Bottles being started at once. @default 2 */
  maxStarting?: number;
  /** Memory all running bottles may take together, in bytes. @default unlimited */
  memoryBudget?: number;
}

export class Capacity {
  readonly maxStarting: number;
  readonly memoryBudget: number;
  #starting = 0;
  #startQueue: Array<() => void> = [];
  readonly #running = new Map<string, number>();
  /** Issues waiting for room, in the order they asked. */
  readonly #waiting = new Map<string, { since: string; bytes: number }>();

  constructor(options: CapacityOptions = {}) {
    this.maxStarting = Math.max(1, options.maxStarting ?? 2);
    this.memoryBudget = options.memoryBudget ?? Number.POSITIVE_INFINITY;
  }

  /** Memory taken by running bottles. */
  get used(): number {
    let n = 0;
    for (const b of this.#running.values()) n += b;
    return n;
  }

  /** Whether `bytes` more would fit now (one bottle always fits when nothing runs). */
  fits(bytes: number): boolean {
    return this.#running.size === 0 || this.used + bytes <= this.memoryBudget;
  }

  /**
   * Take room for `slug` (`bytes` of memory) when it fits, or when nothing
   * runs at all (one bottle always may, whatever its size). Idempotent per slug.
   */
  tryRun(slug: string, bytes: number): boolean {
    if (this.#running.has(slug)) return true;
    if (this.#running.size > 0 && this.used + bytes > this.memoryBudget) return false;
    this.#running.set(slug, bytes);
    return true;
  }

  /** Count a bottle found running (after a restart) without asking. */
  adopt(slug: string, bytes: number): void {
    this.#running.set(slug, bytes);
  }

  /** Give back a bottle's room (its turn ended). */
  release(slug: string): void {
    this.#running.delete(slug);
  }

  isRunning(slug: string): boolean {
    return this.#running.has(slug);
  }

  /** Note that `issue` waits for room. */
  wait(issue: string, bytes: number): void {
    if (!this.#waiting.has(issue))
      this.#waiting.set(issue, { since: new Date().toISOString(), bytes });
  }

  /** Issues waiting, oldest first; removes them (the caller tries them again). */
  takeWaiting(): string[] {
    const all = [...this.#waiting.keys()];
    this.#waiting.clear();
    return all;
  }

  /** Who waits for room, for the dashboard and `bb orchestrate status`. */
  waiting(): Array<{ issue: string; since: string; bytes: number }> {
    return [...this.#waiting].map(([issue, w]) => ({ issue, ...w }));
  }

  /** Run `fn` as start-up work, at most `maxStarting` at once, in order. */
  async starting<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#starting >= this.maxStarting)
      await new Promise<void>((resolve) => this.#startQueue.push(resolve));
    this.#starting++;
    try {
      return await fn();
    } finally {
      this.#starting--;
      this.#startQueue.shift()?.();
    }
  }
}
