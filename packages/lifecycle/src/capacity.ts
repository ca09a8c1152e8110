/**
 * How much the orchestrator runs at once, in two separate limits: start-up
 * work (clone, create, start: disk and CPU heavy, short) and running bottles,
 * counted in memory (each bottle's limit) against a budget. Warm bottles (their
 * containers paused between turns) count in the same budget, with the memory
 * they hold; the caller cools them to make room. Work that does not fit waits
 * here, in order, and the caller is told when to try again.
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
  /** Warm bottles and the memory each holds, the longest warm first. */
  readonly #warm = new Map<string, number>();
  /** Bottles of the warm pool (made ahead of their issues) and the memory each holds. */
  readonly #pooled = new Map<string, number>();
  /** Issues waiting for room, in the order they asked. */
  readonly #waiting = new Map<string, { since: string; bytes: number }>();

  constructor(options: CapacityOptions = {}) {
    this.maxStarting = Math.max(1, options.maxStarting ?? 2);
    this.memoryBudget = options.memoryBudget ?? Number.POSITIVE_INFINITY;
  }

  /** Memory taken by running bottles and held by warm and pooled ones. */
  get used(): number {
    let n = this.warmBytes;
    for (const b of this.#pooled.values()) n += b;
    for (const b of this.#running.values()) n += b;
    return n;
  }

  /** Memory held by warm bottles. */
  get warmBytes(): number {
    let n = 0;
    for (const b of this.#warm.values()) n += b;
    return n;
  }

  /**
   * Whether `bytes` more would fit now (one bottle always fits when nothing
   * runs); for `slug`, a warm bottle, what it holds already is not counted twice.
   */
  fits(bytes: number, slug?: string): boolean {
    const held = slug ? (this.#warm.get(slug) ?? this.#pooled.get(slug) ?? 0) : 0;
    return this.#running.size === 0 || this.used - held + bytes <= this.memoryBudget;
  }

  /** Count a bottle kept warm (its turn ended) with the memory it holds. */
  holdWarm(slug: string, bytes: number): void {
    this.#running.delete(slug);
    this.#warm.delete(slug);
    this.#warm.set(slug, bytes);
  }

  /** Stop counting a warm bottle (it is cooled or resumed); whether it was counted. */
  releaseWarm(slug: string): boolean {
    return this.#warm.delete(slug);
  }

  /** Count a bottle of the warm pool with the memory it holds. */
  holdPooled(slug: string, bytes: number): void {
    this.#pooled.set(slug, bytes);
  }

  /** Stop counting a pooled bottle (it went unused); whether it was counted. */
  releasePooled(slug: string): boolean {
    return this.#pooled.delete(slug);
  }

  /** The pooled bottles, for the dashboard. */
  pooled(): Array<{ slug: string; bytes: number }> {
    return [...this.#pooled].map(([slug, bytes]) => ({ slug, bytes }));
  }

  /** Whether start-up work is under way (the pool refills only when none is). */
  get startingNow(): number {
    return this.#starting;
  }

  /**
   * Warm bottles to cool, the longest warm first, then pooled ones to remove,
   * so that `bytes` more fit in the budget (all of them would not be enough: as
   * many as there are).
   */
  toCool(bytes: number, except?: string): string[] {
    const out: string[] = [];
    let over = this.used + bytes - this.memoryBudget;
    for (const [slug, held] of [...this.#warm, ...this.#pooled]) {
      if (over <= 0) break;
      if (slug === except) continue;
      out.push(slug);
      over -= held;
    }
    return out;
  }

  /** The warm bottles, the longest warm first, for the dashboard and `bb orchestrate status`. */
  warm(): Array<{ slug: string; bytes: number }> {
    return [...this.#warm].map(([slug, bytes]) => ({ slug, bytes }));
  }

  /**
   * Take room for `slug` (`bytes` of memory) when it fits, or when nothing
   * runs at all (one bottle always may, whatever its size). Idempotent per slug.
   */
  tryRun(slug: string, bytes: number): boolean {
    if (this.#running.has(slug)) return true;
    // A warm bottle resumed, a pooled one launched: what it held is counted as running from now on.
    const held = this.#warm.get(slug) ?? this.#pooled.get(slug) ?? 0;
    if (this.#running.size > 0 && this.used - held + bytes > this.memoryBudget) return false;
    this.#warm.delete(slug);
    this.#pooled.delete(slug);
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

  isWarm(slug: string): boolean {
    return this.#warm.has(slug);
  }

  isWaiting(issue: string): boolean {
    return this.#waiting.has(issue);
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
