import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import type { ForgeStateStore } from '@bb/state';
import type { BottleRunner } from './bottle-runner';
import type { Orchestrator } from './orchestrator';
import { issueKey } from './routing';

/** What the orchestrator found and did when it reconciled with the backend. */
export interface ReconcileReport {
  /** Bottles whose turn was in progress: their turns are watched again. */
  reattached: string[];
  /** Containers of ours that no state row owns, removed (by slug). */
  orphansRemoved: string[];
  /** Bottles that never got as far as their agent: removed, their issue launchable again. */
  neverStarted: string[];
  /** Inbox events put back on their issues' queues. */
  replayed: number;
  /** Bottles kept warm by the process before: cooled (nobody counted or timed them). */
  cooled: string[];
}

/**
 * Turn whatever a crash left into a state the orchestrator can move on from,
 * after a start: containers no live row owns are removed; a bottle kept warm is
 * cooled; a bottle whose turn
 * was running is watched again (its end is awaited and recorded as usual, or,
 * when its agent is gone, recorded as vanished); a bottle that never got as far
 * as its agent (no turn, no op log) is removed and its issue is launchable
 * again; then every open inbox event goes back on its issue's queue, in order.
 * Call it once at start, before new events arrive.
 */
export async function reconcile(
  orch: Orchestrator,
  o: { store: ForgeStateStore; runner: BottleRunner; log?: (e: Record<string, unknown>) => void },
): Promise<ReconcileReport> {
  const report: ReconcileReport = {
    reattached: [],
    orphansRemoved: [],
    neverStarted: [],
    replayed: 0,
    cooled: [],
  };
  const log = o.log ?? (() => {});
  await orch.ready();
  const live = await o.store.all();
  const slugs = new Set(live.map((r) => r.slug));
  const ours = await o.runner.ours();
  for (const slug of new Set(
    ours.map((c) => c.labels['bb.slug']).filter((s): s is string => !!s),
  )) {
    if (slugs.has(slug)) continue;
    await o.runner.destroy(slug);
    report.orphansRemoved.push(slug);
    log({ msg: 'orphan bottle removed', slug });
  }
  for (const row of live) {
    if (o.runner.cool && o.runner.meta(row.slug)?.warm) {
      // Warm when the process before stopped (its row saved or not yet): its window went with it.
      try {
        if (await o.runner.cool(row.slug)) report.cooled.push(row.slug);
        log({ msg: 'warm bottle cooled', slug: row.slug, why: 'the orchestrator restarted' });
      } catch (err) {
        log({ msg: 'could not cool a warm bottle', slug: row.slug, error: errorMessage(err) });
      }
    }
    if (row.status !== 'running') continue;
    const key = issueKey(row.owner, row.repo, row.issueNumber);
    const meta = o.runner.meta(row.slug);
    // An agent container made but never started, or one whose program still waits for
    // its workspace (the launch was cut short while it was made), did not run.
    const agentRan =
      !meta?.preparing &&
      ours.some(
        (c) =>
          c.labels['bb.slug'] === row.slug &&
          c.labels['bb.role'] === 'agent' &&
          c.state !== 'created',
      );
    if (!meta || (meta.turns.length === 0 && !agentRan && !wroteAnything(o.runner.dir(row.slug)))) {
      // Killed before its agent: nothing happened worth keeping. Launchable again;
      // the event that launched it is still open in the inbox and comes back.
      try {
        await o.runner.destroy(row.slug);
      } catch (err) {
        log({
          msg: 'could not remove a bottle that never started',
          slug: row.slug,
          error: errorMessage(err),
        });
      }
      await o.store.delete(row.owner, row.repo, row.issueNumber);
      orch.forget(key);
      report.neverStarted.push(row.slug);
      log({ msg: 'bottle never started: removed, issue launchable again', key, slug: row.slug });
      continue;
    }
    orch.adopt(row.slug, row.agentName);
    orch.watch(row.slug, Date.parse(meta.current?.startedAt ?? row.lastCheckinAt) || Date.now());
    report.reattached.push(row.slug);
    log({ msg: 'watching a running bottle again', key, slug: row.slug });
  }
  report.replayed = await orch.replayInbox();
  return report;
}

/** Whether the bottle's sidecar logged any call (then it has evidence to keep). */
function wroteAnything(dir: string): boolean {
  const ops = join(dir, 'state', 'ops.jsonl');
  return existsSync(ops) && statSync(ops).size > 0;
}
