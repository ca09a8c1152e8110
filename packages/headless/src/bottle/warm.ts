/**
 * Warm bottles: after a turn, a bottle may stay warm for a while instead of
 * having its containers removed. Its agent container's waiter idles (no agent
 * process left: the engine's process list says so, not the waiter), both its
 * containers are paused (nothing in them runs, the gate's secrets stay in its
 * memory only) and its disk stays mounted; a resume inside the window unpauses
 * them and hands the waiter the next turn's command, so no container is made.
 * Anything the host cannot vouch for (leftover processes, a changed image or
 * configuration, another token, a PR branch someone pushed to, a container gone
 * or not paused) cools the bottle and the next turn takes the ordinary path.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readFileNoFollow } from '@bb/wall';
import pkg from '../../package.json' with { type: 'json' };
import type { Backend, WaitResult } from '../engine/backend';
import type { BottleMeta, BottlePaths } from './layout';
import { type TurnCommand, turnCommandFile, turnEndFile } from './waiter';

/** Where the waiter says a turn ended, below the agent's home. */
export const TURN_END_DIR = '.bb/turn-end';

/** Whether bottles on `backend` can be kept warm: isolated, its mounts mapped, its processes counted. */
export const canKeepWarm = (backend: Backend): boolean =>
  backend.isolates && backend.mapsMounts && !!backend.processes;

/**
 * The processes a warm agent container may have between turns: the engine's
 * init (which reaps what a turn left) and the waiter.
 */
export const IDLE_PROCESSES = 2;

/** Leave turn `n`'s command for the waiter (written aside, then renamed into place). */
export function writeTurnCommand(p: BottlePaths, n: number, command: TurnCommand): void {
  mkdirSync(p.turns, { recursive: true, mode: 0o755 });
  // Earlier turns' commands are done with.
  for (const f of readdirSync(p.turns)) rmSync(join(p.turns, f), { force: true });
  const part = join(p.turns, `.${n}.part`);
  writeFileSync(part, JSON.stringify(command), { mode: 0o644 });
  renameSync(part, join(p.turns, turnCommandFile(n)));
}

/** A new turn's nonce (see `turnEndFile`). */
export const turnNonce = (): string => randomBytes(12).toString('hex');

/**
 * Turn `n`'s end as the waiter said it, read as data from the agent's home
 * (following no link): its exit code, `undefined` while it runs. A file that is
 * not a small regular file holding a number still ends the turn, as a failure.
 */
export function readTurnEnd(p: BottlePaths, n: number, nonce: string): number | undefined {
  let buf: Buffer | undefined;
  try {
    buf = readFileNoFollow(p.home, `${TURN_END_DIR}/${turnEndFile(n, nonce)}`, { maxBytes: 16 });
  } catch {
    return 1;
  }
  if (!buf) return undefined;
  const m = /^(\d{1,3})\s*$/.exec(buf.toString('utf8'));
  return m ? Number(m[1]) : 1;
}

/** How a waiter's turn ended: said by the waiter (the container still up), or by the container's exit. */
export type TurnEnd = WaitResult & { exited: boolean };

/**
 * Wait for turn `n` of the agent container `id` to end: the waiter's word, or
 * the container's exit (the waiter gone, stopped, out of memory).
 */
export async function awaitTurnEnd(
  backend: Backend,
  id: string,
  p: BottlePaths,
  n: number,
  nonce: string,
): Promise<TurnEnd> {
  let stop = false;
  const abort = new AbortController();
  const exited = backend
    .wait(id, { signal: abort.signal })
    .then((r): TurnEnd => ({ ...r, exited: true }));
  const said = (async (): Promise<TurnEnd | undefined> => {
    while (!stop) {
      const code = readTurnEnd(p, n, nonce);
      if (code !== undefined) return { exitCode: code, oomKilled: false, exited: false };
      await new Promise((r) => setTimeout(r, 50));
    }
    return undefined;
  })();
  exited.catch(() => {});
  try {
    const first = await Promise.race([exited, said]);
    return first ?? (await exited);
  } finally {
    stop = true;
    abort.abort();
  }
}

/**
 * A digest of what a turn's containers are made for: when the next turn's
 * differs, they cannot serve it.
 */
export function warmKey(parts: {
  meta: BottleMeta;
  gateImage: string;
  config: unknown;
  token: string | undefined;
  supervised: boolean;
}): string {
  const { meta } = parts;
  const text = canonical({
    version: pkg.version,
    image: meta.image,
    gateImage: parts.gateImage,
    bottles: meta.bottles,
    config: parts.config,
    // Its PR is not the containers': the gate's scope is asked instead (a PR it opened is in it).
    forge: meta.forge ? { ...meta.forge, pr: null } : null,
    mirror: meta.mirror ?? null,
    disk: meta.diskBytes ?? null,
    token: parts.token ? createHash('sha256').update(parts.token).digest('hex') : null,
    supervised: parts.supervised,
  });
  return createHash('sha256').update(text).digest('hex');
}

/** JSON with every object's keys in order: the same value is the same text, however it was built. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}
