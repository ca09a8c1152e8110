/**
 * Runs tasks one at a time per key (an issue and its PRs), in the order they
 * were added, with at most `concurrency` keys running at once.
 */
export class SerialQueue<T> {
  readonly #queues = new Map<string, T[]>();
  readonly #waiting: string[] = [];
  #running = 0;
  #idle: Array<() => void> = [];

  constructor(
    readonly concurrency: number,
    readonly worker: (key: string, item: T) => Promise<void>,
    readonly onError: (key: string, item: T, err: unknown) => void = () => {},
    /** Order of waiting items of one key (e.g. by the forge's timestamps); the running one is never moved. */
    readonly compare?: (a: T, b: T) => number,
  ) {}

  push(key: string, item: T): void {
    const q = this.#queues.get(key);
    if (q) {
      // Index 0 is running; insert among the waiting ones in order.
      let at = q.length;
      if (this.compare) while (at > 1 && this.compare(item, q[at - 1]!) < 0) at--;
      q.splice(at, 0, item);
      return;
    }
    this.#queues.set(key, [item]);
    this.#waiting.push(key);
    this.#pump();
  }

  /** Resolves when nothing is queued or running. */
  idle(): Promise<void> {
    if (this.#running === 0 && this.#waiting.length === 0) return Promise.resolve();
    return new Promise((r) => this.#idle.push(r));
  }

  /**
   * Whether an item of `key` waiting behind the running one comes before `item` in
   * the queue's order (it was added while `item` had already begun).
   */
  hasEarlier(key: string, item: T): boolean {
    const q = this.#queues.get(key);
    if (!q || !this.compare) return false;
    return q.slice(1).some((w) => w !== item && this.compare!(w, item) < 0);
  }

  /** Items of `key` queued or running. */
  pending(key: string): number {
    return this.#queues.get(key)?.length ?? 0;
  }

  get size(): number {
    let n = 0;
    for (const q of this.#queues.values()) n += q.length;
    return n;
  }

  #pump(): void {
    while (this.#running < this.concurrency && this.#waiting.length > 0) {
      const key = this.#waiting.shift()!;
      this.#running++;
      void this.#drain(key).finally(() => {
        this.#running--;
        this.#pump();
        if (this.#running === 0 && this.#waiting.length === 0)
          for (const r of this.#idle.splice(0)) r();
      });
    }
  }

  async #drain(key: string): Promise<void> {
    const q = this.#queues.get(key)!;
    while (q.length > 0) {
      const item = q[0]!;
      try {
        await this.worker(key, item);
      } catch (err) {
        this.onError(key, item, err);
      }
      q.shift();
    }
    this.#queues.delete(key);
  }
}
