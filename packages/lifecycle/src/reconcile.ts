import { type BottleRunner, heldByLivePool } from '@bb/headless';
import { LABEL } from '@bb/names';
import type { ForgeStateStore } from '@bb/state';
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
 * after a start. Containers no live row owns are removed (by one orchestrator
 * at a time, when several share the database). Then every issue with a live
 * bottle or open inbox events that no other orchestrator holds is taken over
 * (`Orchestrator.adoptIssue`): a bottle kept warm is cooled; a bottle whose
 * turn was running is watched again (its end is awaited and recorded as usual,
 * or, when its agent is gone, recorded as vanished); a bottle that never got as
 * far as its agent (no turn, no op log) is removed and its issue is launchable
 * again; its open events go back on its queue, in order.
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
  // Per engine: replicas that each run their own (a shared bottle store) each clean theirs.
  const engine = await o.runner.engine?.();
  const task = engine ? `reconcile:${engine}` : 'reconcile';
  if (await orch.claimTask(task, 120_000)) {
    try {
      // Containers first, rows second: a bottle launched meanwhile saved its row
      // before it made a container, so no container listed lacks a row read after.
      const ours = await o.runner.ours();
      const slugs = new Set((await o.store.all()).map((r) => r.slug));
      for (const slug of new Set(
        ours.map((c) => c.labels[LABEL.slug]).filter((s): s is string => !!s),
      )) {
        // A warm pool's (this process's, or another's alive on this machine): made ahead
        // of any issue, so no row is theirs yet. A dead process's pool is orphaned.
        if (o.runner.pool?.owns(slug) || heldByLivePool(await o.runner.storage.meta(slug)))
          continue;
        if (slugs.has(slug)) {
          // A bottle in a shared store that runs elsewhere now (taken over while this
          // machine was down): what is left of it here goes, its files stay.
          if (await o.runner.release?.(slug)) {
            report.orphansRemoved.push(slug);
            log({ msg: 'containers of a bottle that runs elsewhere now removed', slug });
          }
          continue;
        }
        await o.runner.destroy(slug);
        report.orphansRemoved.push(slug);
        log({ msg: 'orphan bottle removed', slug });
      }
    } finally {
      await orch.releaseTask(task);
    }
  }
  const issues = new Set(
    (await o.store.all()).map((r) => issueKey(r.owner, r.repo, r.issueNumber)),
  );
  for (const issue of issues) {
    const r = await orch.adoptIssue(issue);
    if (!r) continue;
    if (r.cooled) report.cooled.push(r.cooled);
    if (r.reattached) report.reattached.push(r.reattached);
    if (r.neverStarted) report.neverStarted.push(r.neverStarted);
    report.replayed += r.replayed;
  }
  report.replayed += await orch.replayInbox();
  return report;
}
