import { isBbError } from '@bb/errors';

/** How long a step that must reach the database waits it out, in all. @default 10 min */
export const OUTAGE_WAIT_MS = 10 * 60_000;

/**
 * Run `fn` until the database takes it: while it fails because the database is
 * away or busy (`STATE_UNWRITABLE`, `STATE_BUSY`: an outage, a restart, a
 * failover), it is tried again, waiting 0.25 s doubling to 5 s, for `maxMs` at
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
  },
): Promise<T> {
  const end = Date.now() + (o.maxMs ?? OUTAGE_WAIT_MS);
  let wait = 250;
  for (let tries = 1; ; tries++) {
    try {
      return await fn();
    } catch (err) {
      const away = isBbError(err, 'STATE_UNWRITABLE') || isBbError(err, 'STATE_BUSY');
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
