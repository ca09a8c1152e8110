import type { QueueEvent } from '@bb/forge-sidecar';
import type { BottleStorage } from '@bb/headless';
import type { WatchdogReason } from './machine';
import type { HiddenNote } from './visible';

/**
 * What the orchestrator learned about a bottle's running turn from its
 * sidecar's queue, kept as the orchestrator's note `turn` in the bottle's
 * storage so it survives a restart: queue files are removed only after what they
 * said is written here.
 */
export interface TurnLog {
  /** The first done signal of the turn. */
  done: { status: 'success' | 'failure' | 'blocked'; summary: string } | null;
  /** PRs the turn opened. */
  prs: number[];
  /** Commits the sidecar took in to push (relayed before each push). */
  pushed: string[];
  /** The op log's head as last relayed. */
  head?: { hash: string; seq: number };
  /** The sidecar's last check-in. */
  lastCheckinAt?: string;
  /** Why the orchestrator stopped the agent, when it did. */
  fired?: { reason: WatchdogReason; detail: string };
  /** This turn began a fresh session in place of a long one. */
  rotated?: { reason: string; previousTurns: number; summary: string };
  /** What was taken out of the text this turn's prompt quotes (readers could not see it). */
  hidden?: HiddenNote[];
}

const EMPTY: TurnLog = { done: null, prs: [], pushed: [] };

const NOTE = 'turn';

/** Changes to a bottle's turn log, one after another (a read-modify-write is never interleaved). */
const locks = new WeakMap<BottleStorage, Map<string, Promise<unknown>>>();

/** Run `fn` alone among the turn-log changes of `slug` in `storage`. */
export function withTurnLog<T>(
  storage: BottleStorage,
  slug: string,
  fn: () => Promise<T>,
): Promise<T> {
  let bySlug = locks.get(storage);
  if (!bySlug) {
    bySlug = new Map();
    locks.set(storage, bySlug);
  }
  const before = bySlug.get(slug) ?? Promise.resolve();
  const run = before.catch(() => {}).then(fn);
  const held = run.catch(() => {});
  bySlug.set(slug, held);
  void held.then(() => {
    if (bySlug.get(slug) === held) bySlug.delete(slug);
  });
  return run;
}

/** Change the turn log with `change` (read, changed, written whole, alone). */
export function updateTurnLog(
  storage: BottleStorage,
  slug: string,
  change: (log: TurnLog) => TurnLog,
): Promise<TurnLog> {
  return withTurnLog(storage, slug, async () => {
    const next = change(await readTurnLog(storage, slug));
    await writeTurnLog(storage, slug, next);
    return next;
  });
}

export async function readTurnLog(storage: BottleStorage, slug: string): Promise<TurnLog> {
  const text = await storage.readNote(slug, NOTE);
  if (text === undefined) return structuredClone(EMPTY);
  try {
    return { ...structuredClone(EMPTY), ...(JSON.parse(text) as TurnLog) };
  } catch {
    return structuredClone(EMPTY);
  }
}

export function writeTurnLog(storage: BottleStorage, slug: string, log: TurnLog): Promise<void> {
  return storage.writeNote(slug, NOTE, JSON.stringify(log));
}

/** Where notes of hidden text wait for the turn whose prompt quotes it (the next one). */
const HIDDEN_NOTE = 'prompt-hidden';

async function readHidden(
  storage: BottleStorage,
  slug: string,
): Promise<{ kept: HiddenNote[]; found: boolean }> {
  const text = await storage.readNote(slug, HIDDEN_NOTE);
  if (text === undefined) return { kept: [], found: false };
  try {
    const kept = JSON.parse(text) as unknown;
    return { kept: Array.isArray(kept) ? (kept as HiddenNote[]) : [], found: true };
  } catch {
    return { kept: [], found: true };
  }
}

/** Keep `notes` for the bottle's next turn (its prompt quotes the text they are about). */
export function noteHidden(
  storage: BottleStorage,
  slug: string,
  notes: HiddenNote[],
): Promise<void> {
  if (notes.length === 0) return Promise.resolve();
  return withTurnLog(storage, slug, async () => {
    const { kept } = await readHidden(storage, slug);
    await storage.writeNote(slug, HIDDEN_NOTE, JSON.stringify([...kept, ...notes]));
  });
}

/** The turn starting now takes the notes kept for it (and `more`) into its turn log. */
export function takeHidden(
  storage: BottleStorage,
  slug: string,
  more: HiddenNote[] = [],
): Promise<void> {
  return withTurnLog(storage, slug, async () => {
    const { kept, found } = await readHidden(storage, slug);
    const all = [...kept, ...more];
    if (all.length > 0) {
      const log = await readTurnLog(storage, slug);
      await writeTurnLog(storage, slug, { ...log, hidden: [...(log.hidden ?? []), ...all] });
    }
    if (found) await storage.removeNote(slug, HIDDEN_NOTE);
  });
}

/** Forget the turn (once its record is written). */
export function clearTurnLog(storage: BottleStorage, slug: string): Promise<void> {
  return withTurnLog(storage, slug, () => storage.removeNote(slug, NOTE));
}

/** What a drain found that the orchestrator must act on. */
export interface TurnNews {
  /** PRs seen for the first time. */
  prs: number[];
  /** The done signal, the first time it is seen. */
  done: boolean;
  /** Whether a check-in arrived, and the latest one's time. */
  checkedIn: boolean;
  lastCheckinAt?: string;
}

/**
 * Read every event the sidecar queued, fold it into the bottle's turn log
 * (written before each queue file goes), and say what is new.
 */
export function drainTurn(storage: BottleStorage, slug: string): Promise<TurnNews> {
  return withTurnLog(storage, slug, () => drainAlone(storage, slug));
}

async function drainAlone(storage: BottleStorage, slug: string): Promise<TurnNews> {
  const log = await readTurnLog(storage, slug);
  const news: TurnNews = { prs: [], done: false, checkedIn: false };
  await storage.drainQueue(slug, async (e: QueueEvent) => {
    const prNumber = e.data['prNumber'];
    if (e.type === 'op' && typeof prNumber === 'number' && !log.prs.includes(prNumber)) {
      log.prs.push(prNumber);
      news.prs.push(prNumber);
    }
    const sha = e.data['sha'];
    if (
      (e.type === 'op' || e.type === 'checkin') &&
      typeof sha === 'string' &&
      !log.pushed.includes(sha)
    )
      log.pushed.push(sha);
    if (e.type === 'done' && !log.done) {
      log.done = e.data as unknown as NonNullable<TurnLog['done']>;
      news.done = true;
    }
    if (e.type === 'checkin') {
      news.checkedIn = true;
      if (!log.lastCheckinAt || e.time > log.lastCheckinAt) log.lastCheckinAt = e.time;
      news.lastCheckinAt = log.lastCheckinAt;
      if (typeof e.data['opLogHead'] === 'string')
        log.head = { hash: e.data['opLogHead'], seq: Number(e.data['opLogSeq']) };
    }
    // Durable before the queue file is removed.
    await writeTurnLog(storage, slug, log);
  });
  return news;
}
