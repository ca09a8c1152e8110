import { isBbError } from '@bb/errors';

/** How long a step that must reach the database waits it out, in all. @default 10 min */
export const OUTAGE_WAIT_MS = 10 * 60_000;

/**
 * Whether `err` says the database server is away for now (an outage, a restart, a
 * failover: `STATE_UNWRITABLE` from a PostgreSQL store, which names the server's
 * code in `data.pg`) or busy (`STATE_BUSY`): what waiting fixes. A full local disk
 * is not: the turn's end is then done again from the start once there is room.
 */
export function storeAway(err: unknown): boolean {
  if (isBbError(err, 'STATE_BUSY')) return true;
  if (!isBbError(err, 'STATE_UNWRITABLE')) return false;
  const data = (err as { data?: unknown }).data;
  return typeof data === 'object' && data !== null && 'pg' in data;
}

/**
 * Run `fn` until the database takes it: while it fails because the database
 * server is away or busy (`storeAway`: an outage, a restart, a failover), it is
 * tried again, waiting 0.25 s doubling to 5 s, for `maxMs` at
 * most. For the steps nothing else would redo: a turn's record and its frozen row.
 * Any other error, the last one, or a close, is thrown.
 */
export async function untilStored<T>(
  what: string,
  fn: () => Promise<T>,
  o: {
    log: (entry: Record<string, unknown>) => void;
    closed: () => boolean;
    maxMs?: number;
    /** Called at each try the store was away for. */
    onAway?: () => void;
  },
): Promise<T> {
  const end = Date.now() + (o.maxMs ?? OUTAGE_WAIT_MS);
  let wait = 250;
  for (let tries = 1; ; tries++) {
    try {
      return await fn();
    } catch (err) {
      const away = storeAway(err);
      if (away) o.onAway?.();
      if (!away || o.closed() || Date.now() + wait > end) throw err;
      // Once per doubling is enough for the log: an outage of minutes says so a few times.
      if (tries === 1 || wait < 5000)
        o.log({
          msg: `database unavailable: ${what} waits for it`,
          tries,
          retryInMs: wait,
          error: (err as Error).message,
        });
      await new Promise((r) => setTimeout(r, wait));
      wait = Math.min(wait * 2, 5000);
    }
  }
}
