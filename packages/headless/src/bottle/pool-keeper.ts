/**
 * The orchestrator's warm pool (`BB_POOL=<agent>:<n>,...`): for each agent it
 * names, up to `n` pooled bottles (`pool.ts`) kept ready, each handed out once.
 * The pool is refilled in the background, one bottle at a time, only while the
 * caller says there is room (its memory budget, nobody waiting, no launch being
 * started), so it never takes what running work needs.
 */
import { BbError, errorMessage } from '@bb/errors';
import { LABEL } from '@bb/names';
import { destroy } from './bottle-parts';
import { listBottles, readMeta } from './layout';
import { loadAgentManifest } from './manifests';
import { canPool, heldByLivePool, makePooled, type PoolBottleOptions } from './pool';

/** `BB_POOL`'s value: how many pooled bottles to keep of each agent. */
export function parsePoolSizes(raw: string | undefined): Map<string, number> {
  const sizes = new Map<string, number>();
  if (raw === undefined || raw.trim() === '' || raw.trim().toLowerCase() === 'off') return sizes;
  for (const part of raw.split(',')) {
    const m = /^\s*([a-z0-9][a-z0-9._-]{0,62}):(\d{1,2})\s*$/.exec(part);
    const n = m ? Number(m[2]) : Number.NaN;
    if (!m || n < 1 || n > 32 || sizes.has(m[1]!))
      throw new BbError(
        'INVALID_INPUT',
        `BB_POOL ${JSON.stringify(raw)}: ${JSON.stringify(part.trim())} must be <agent>:<n>, each agent once, n from 1 to 32 (e.g. implementer:4,reviewer:1), or off`,
      );
    sizes.set(m[1]!, n);
  }
  return sizes;
}

/** What the pool asks of its caller before it makes another bottle, and tells it after. */
export interface PoolRoom {
  /**
   * Whether a pooled bottle holding about `bytes` may be made now; when it may,
   * the caller keeps that room for it until `made` or `unmade`.
   */
  room(bytes: number): boolean;
  /** The bottle made in the room kept (counted in the caller's budget until it is taken or dropped). */
  made?(slug: string, bytes: number): void;
  /** The room kept came to nothing (the make failed, or the pool closed meanwhile). */
  unmade?(): void;
  /** A held bottle is gone without being taken (dropped, or found broken). */
  gone?(slug: string): void;
}

export interface WarmPoolOptions extends Omit<PoolBottleOptions, 'agent' | 'bottles'> {
  sizes: Map<string, number>;
  log?: ((entry: Record<string, unknown>) => void) | undefined;
  /** How long the pool waits before it asks for room again. @default 1000 */
  retryMs?: number;
}

/** A bottle in the pool: what it holds, as the engine counted it once it was up. */
interface Held {
  slug: string;
  agent: string;
  bytes: number;
}

/** Before a bottle is made and counted, the pool guesses it holds this much. */
const GUESS = 96 * 1024 ** 2;

export class WarmPool {
  readonly #o: WarmPoolOptions;
  readonly #ready = new Map<string, Held>();
  #making: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #room: PoolRoom | undefined;
  #closed = false;
  /** The last failure per agent, so a broken manifest is said once, not every second. */
  readonly #failed = new Map<string, string>();

  constructor(o: WarmPoolOptions) {
    this.#o = o;
    for (const agent of o.sizes.keys())
      if (!/^[a-z0-9]/.test(agent))
        throw new BbError('INVALID_INPUT', `BB_POOL names agent ${agent}, which is not a name`);
    if (o.sizes.size > 0 && !canPool(o.backend))
      throw new BbError(
        'INVALID_INPUT',
        `BB_POOL needs root and a backend whose containers' processes can be counted (docker), not ${o.backend.name}: unset BB_POOL`,
      );
  }

  /** Whether `slug` is a bottle this pool holds (made, not taken). */
  owns(slug: string): boolean {
    return this.#ready.has(slug);
  }

  /** The bottles held, for the dashboard and `bb orchestrate status`. */
  held(): Array<{ slug: string; agent: string; bytes: number }> {
    return [...this.#ready.values()].map((h) => ({ ...h }));
  }

  /**
   * A pooled bottle of `agent` for a launch (its slug: launch under it), taken out
   * of the pool for good; undefined when none is ready, or the launch names other
   * bottles than the agent's own (the pool's were made for those). The pool refills.
   */
  take(agent: string, bottles?: string[] | undefined): string | undefined {
    if (bottles && !this.#defaultBottles(agent, bottles)) return undefined;
    for (const h of this.#ready.values())
      if (h.agent === agent) {
        this.#ready.delete(h.slug);
        this.#o.log?.({ msg: 'pooled bottle taken', slug: h.slug, agent });
        this.#later(0);
        return h.slug;
      }
    return undefined;
  }

  #defaultBottles(agent: string, bottles: string[]): boolean {
    try {
      const own = loadAgentManifest(agent, this.#o.env ?? process.env).manifest.bottles;
      return own.length === bottles.length && own.every((b, i) => b === bottles[i]);
    } catch {
      return false;
    }
  }

  /**
   * Keep the pool filled from now on, asking `room` before each bottle. Called
   * again (when room may have come free), it looks at once.
   */
  fill(room: PoolRoom): void {
    const first = !this.#room;
    this.#room = room;
    if (first) this.#swept = this.#sweep();
    this.#later(0);
  }

  #swept: Promise<void> | undefined;

  /**
   * Remove the pooled bottles a process before this one left (its pool is gone, so
   * nobody will bind them): those a crash left half-made, with no container for a
   * reconcile to find, included.
   */
  async #sweep(): Promise<void> {
    const env = this.#o.env ?? process.env;
    for (const slug of listBottles(env)) {
      const meta = readMeta(slug, env);
      if (!meta?.pooled || heldByLivePool(meta)) continue;
      await destroy(slug, this.#o).catch(() => {});
      this.#o.log?.({ msg: 'pooled bottle an earlier process left removed', slug });
    }
  }

  /**
   * A bottle taken for a launch that failed before it was bound: removed (it was
   * never the issue's, and is never handed out again). Nothing for one bound since.
   */
  async discard(slug: string): Promise<void> {
    if (readMeta(slug, this.#o.env ?? process.env)?.pooled) await destroy(slug, this.#o);
  }

  #later(ms: number): void {
    if (this.#closed || !this.#room) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#fillNow(), ms);
    this.#timer.unref();
  }

  /** The agent most short of its size, or undefined when none is. */
  #short(): string | undefined {
    let best: { agent: string; missing: number } | undefined;
    for (const [agent, n] of this.#o.sizes) {
      const have = [...this.#ready.values()].filter((h) => h.agent === agent).length;
      if (have < n && (!best || n - have > best.missing)) best = { agent, missing: n - have };
    }
    return best?.agent;
  }

  async #fillNow(): Promise<void> {
    if (this.#making || this.#closed) return;
    await this.#swept;
    const agent = this.#short();
    if (!agent) return;
    const room = this.#room!;
    const guess = this.#bytesOf(agent);
    if (!room.room(guess)) {
      this.#later(this.#o.retryMs ?? 1000);
      return;
    }
    this.#making = (async () => {
      try {
        const { sizes: _, log: __, retryMs: ___, ...o } = this.#o;
        const slug = await makePooled({ ...o, agent });
        if (this.#closed) {
          room.unmade?.();
          await destroy(slug, this.#o).catch(() => {});
          return;
        }
        // Ready at once, counted at what the last one held; then at what this one holds.
        const held: Held = { slug, agent, bytes: this.#bytesOf(agent) };
        this.#ready.set(slug, held);
        this.#failed.delete(agent);
        room.made?.(slug, held.bytes);
        held.bytes = await this.#measure(slug);
        if (this.#ready.get(slug) === held) room.made?.(slug, held.bytes);
        this.#o.log?.({ msg: 'pooled bottle ready', slug, agent, bytes: held.bytes });
      } catch (err) {
        room.unmade?.();
        const error = errorMessage(err);
        if (this.#failed.get(agent) !== error)
          this.#o.log?.({ msg: 'could not make a pooled bottle', agent, error });
        this.#failed.set(agent, error);
        // A failure is tried again, not at once.
        this.#later(Math.max(this.#o.retryMs ?? 1000, 5000));
        return;
      } finally {
        this.#making = undefined;
      }
      this.#later(0);
    })();
    await this.#making;
  }

  /** What a pooled bottle of `agent` holds, as the last one made did. */
  #bytesOf(agent: string): number {
    for (const h of this.#ready.values()) if (h.agent === agent) return h.bytes;
    return GUESS;
  }

  async #measure(slug: string): Promise<number> {
    const { backend } = this.#o;
    if (!backend.memoryUsage) return GUESS;
    const containers = await backend.list({ [LABEL.slug]: slug });
    const used = await Promise.all(
      containers.map((c) => backend.memoryUsage!(c.id).catch(() => undefined)),
    );
    return used.reduce<number>((a, b) => a + (b ?? 0), 0) || GUESS;
  }

  /** Remove one held bottle (its memory is needed, or it is broken). Whether it was held. */
  async drop(slug: string): Promise<boolean> {
    if (!this.#ready.delete(slug)) return false;
    this.#room?.gone?.(slug);
    await destroy(slug, this.#o);
    this.#o.log?.({ msg: 'pooled bottle removed', slug });
    return true;
  }

  /** Stop refilling and remove every bottle still held (the orchestrator stops). */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#making?.catch(() => {});
    const held = [...this.#ready.keys()];
    this.#ready.clear();
    await Promise.all(held.map((s) => destroy(s, this.#o).catch(() => {})));
  }
}
