/**
 * The host's side of fencing the agent's writes (`@bb/forge-sidecar`'s `hold.ts`):
 * a bottle started under a hold (an orchestrator in a fleet, its lease on the
 * issue) gets a gate id of its own; the host writes that id and the hold's
 * deadline into the gate's state folder before the gate serves, and again at
 * each renewal. A gate whose host stopped renewing, or that another host
 * replaced, sends no forge write.
 */
import { randomBytes } from 'node:crypto';
import { formatHold, HOLD_FILE } from '@bb/forge-sidecar';
import { homeLayout } from '@bb/names';
import { writeFileNoFollow } from '@bb/wall';
import { type BottleMeta, type BottlePaths, bottlePaths, readMeta } from './layout';

/** A new gate's id in the hold file. */
export function newHoldId(): string {
  return `gate-${randomBytes(12).toString('hex')}`;
}

/** Write the hold of `meta`'s gate until `untilMs` (wall clock), following no link. */
export function writeHold(p: BottlePaths, meta: Pick<BottleMeta, 'holdId'>, untilMs: number): void {
  if (!meta.holdId) return;
  writeFileNoFollow(p.state, HOLD_FILE, formatHold(meta.holdId, untilMs), { createDirs: false });
}

/**
 * Renew the hold of a bottle's gate until `untilMs`: only a bottle started under a
 * hold whose gate may serve (running, or kept warm), on this engine (`engine`, when
 * the backend can say): a gate that runs on another machine (one that stalled, whose
 * issue this process took over) is never renewed from here. Whether it was renewed.
 */
export function renewHold(
  slug: string,
  untilMs: number,
  env: Record<string, string | undefined> = process.env,
  engine?: string,
): boolean {
  const meta = readMeta(slug, env);
  if (!meta?.holdId || (meta.status !== 'running' && !meta.warm)) return false;
  if (meta.engine && engine && meta.engine !== engine) return false;
  writeHold(bottlePaths(slug, env), meta, untilMs);
  return true;
}

/**
 * Whether `meta`'s next gate runs under a hold: a new gate id when it does (a
 * bottle with a forge in a shared bottle store, its orchestrator holding the
 * issue), none when not.
 * Returns the hold's deadline, to write once the gate's state folder is there.
 */
export function holdNewGate(
  meta: Pick<BottleMeta, 'holdId' | 'forge'>,
  holdUntil: (() => number | undefined) | undefined,
  env: Record<string, string | undefined>,
): number | undefined {
  // Only in a shared store, where another host may run the bottle next. With one
  // BB_HOME and one engine, a host taking the issue over goes on with the same
  // turn in the same containers: their calls are its own, never refused meanwhile.
  const until = meta.forge && homeLayout(env).shared ? holdUntil?.() : undefined;
  if (until === undefined) delete meta.holdId;
  else meta.holdId = newHoldId();
  return until;
}
