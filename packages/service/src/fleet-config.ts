import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, errorMessage } from '@bb/errors';
import { agreement, type FleetRoster } from '@bb/state';

/** The most a configuration directory may hold to be hashed. */
const MAX_BYTES = 64 * 1024 * 1024;

/**
 * What the configuration every replica must share hashes to: each file under
 * `dir` (agents, bottles, policy, prices), by path and content, in name order.
 * Links are followed and dot-entries skipped, so a Kubernetes ConfigMap mount
 * (its `..data` links) hashes as the plain directory it stands for. A missing
 * directory hashes as an empty one.
 */
export function configHash(dir: string): string {
  const hash = createHash('sha256');
  let bytes = 0;
  const walk = (at: string, rel: string, depth: number) => {
    let names: string[];
    try {
      names = readdirSync(at);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const name of names.filter((n) => !n.startsWith('.')).sort()) {
      const path = join(at, name);
      const st = statSync(path);
      if (st.isDirectory()) {
        if (depth >= 8)
          throw new BbError(
            'INVALID_INPUT',
            `${path}: the configuration nests deeper than 8 folders`,
          );
        walk(path, `${rel}${name}/`, depth + 1);
      } else if (st.isFile()) {
        bytes += st.size;
        if (bytes > MAX_BYTES)
          throw new BbError(
            'TOO_LARGE',
            `${dir} holds more than 64 MiB: it is not a configuration`,
          );
        hash.update(`${rel}${name}\0${st.size}\0`).update(readFileSync(path)).update('\0');
      }
    }
  };
  walk(dir, '', 0);
  return hash.digest('hex');
}

export interface FleetConfigOptions {
  roster: FleetRoster;
  replica: string;
  hash: string;
  ttlMs: number;
  log: { info(e: Record<string, unknown>): void; error(e: Record<string, unknown>): void };
  /** Stop waiting (a shutdown): the wait then throws `ABORTED`. */
  signal?: AbortSignal;
}

/**
 * Check in to the fleet's roster until this replica's configuration is the
 * fleet's (the first-joined live member's): until then it takes no work, and
 * says so once, naming whom it differs from. Returns once it agrees.
 */
export async function awaitAgreement(o: FleetConfigOptions): Promise<void> {
  let said = false;
  for (;;) {
    const members = await o.roster.checkIn(o.replica, o.hash, o.ttlMs);
    const a = agreement(members, o.replica);
    if (a.agreed) {
      if (said)
        o.log.info({
          msg: 'configuration agrees with the fleet now: taking work',
          replica: o.replica,
        });
      return;
    }
    if (!said)
      o.log.error({
        msg: `this replica's configuration (agents, bottles, policy: ${o.hash.slice(0, 12)}) differs from the fleet's (${a.with.configHash.slice(0, 12)}, since ${a.with.joinedAt} on ${a.with.replica}): it takes no work until they agree. Give every replica the same configuration, or stop the others first`,
        replica: o.replica,
        ours: o.hash,
        fleet: a.with.configHash,
        first: a.with.replica,
      });
    said = true;
    if (o.signal?.aborted)
      throw new BbError('ABORTED', 'stopped while waiting for the fleet to agree');
    await new Promise<void>((r) => {
      const t = setTimeout(r, Math.max(100, Math.floor(o.ttlMs / 3)));
      o.signal?.addEventListener('abort', () => {
        clearTimeout(t);
        r();
      });
    });
  }
}

/** Keep checking in (every third of the time given) until the returned function is called. */
export function keepCheckingIn(o: FleetConfigOptions): () => void {
  const t = setInterval(
    () =>
      // A store that answers at once (SQLite) throws at once: caught all the same.
      void Promise.resolve()
        .then(() => o.roster.checkIn(o.replica, o.hash, o.ttlMs))
        .catch((err) =>
          o.log.error({ msg: 'could not check in to the fleet roster', error: errorMessage(err) }),
        ),
    Math.max(100, Math.floor(o.ttlMs / 3)),
  );
  t.unref();
  return () => clearInterval(t);
}
