import { existsSync } from 'node:fs';
import { BbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import { Orchestrator } from '../src/orchestrator';
import { reconcile } from '../src/reconcile';
import { issueKey } from '../src/routing';
import { readTurnLog } from '../src/turn-log';

import { cleanups, GiB, OWNER, REPO, said, setup, until } from './orchestrator-setup';

describe('Orchestrator', () => {
  it('never lets a running turn hold up another issue: a ninth issue starts and a frozen PR closes while eight agents work', async () => {
    const t = setup();
    const issues = Array.from({ length: 8 }, () => t.issue());
    for (const n of issues) await t.orch.accept(t.ev.targeted(n));
    await t.orch.idle();
    await until('eight agents running', () => t.runner.runningSlugs.length === 8);
    // A frozen bottle, and a new issue, while all eight work.
    const frozen = t.issue();
    await t.orch.accept(t.ev.targeted(frozen));
    await until('the tenth agent', () => t.runner.isRunning(t.slugOf(frozen)));
    t.runner.agent(t.slugOf(frozen)).openPr(90);
    t.runner.agent(t.slugOf(frozen)).done();
    t.runner.agent(t.slugOf(frozen)).exit(0);
    await until('frozen', () => t.row(frozen)?.status === 'frozen');
    const fresh = t.issue();
    const began = Date.now();
    await t.orch.accept(t.ev.targeted(fresh));
    await t.orch.accept(t.ev.closed(90));
    await t.orch.idle();
    expect(t.runner.calls).toContain(`launch ${t.slugOf(fresh)}`);
    expect(t.runner.calls.filter((c) => c.startsWith('destroy '))).toEqual([
      `destroy ${t.slugOf(frozen)}`,
    ]);
    expect(Date.now() - began).toBeLessThan(2000);
    expect(t.row(frozen)?.status).toBe('destroyed');
    expect(t.store.all().map((r) => r.issueNumber)).not.toContain(frozen);
    expect(t.store.history({ limit: 10 }).map((r) => r.issueNumber)).toEqual([frozen]);
    expect(t.runner.runningSlugs).toHaveLength(9);
  });

  it('waits for capacity in order, says so, and starts the waiting issue when a turn ends', async () => {
    const t = setup({ capacity: { maxStarting: 1, memoryBudget: 2 * GiB } });
    const [a, b, c] = [t.issue(), t.issue(), t.issue()];
    for (const n of [a, b, c]) await t.orch.accept(t.ev.targeted(n));
    await t.orch.idle();
    expect(t.runner.runningSlugs).toHaveLength(2);
    expect(t.orch.capacity.waiting().map((w) => w.issue)).toEqual([issueKey(OWNER, REPO, c)]);
    expect(t.logs.some((l) => l['msg'] === 'waiting for capacity')).toBe(true);
    expect(t.store.openEvents().map((e) => e.state)).toEqual(['deferred']);
    t.runner.agent(t.slugOf(a)).done();
    t.runner.agent(t.slugOf(a)).exit(0);
    await until('the third issue launched', () => t.runner.isRunning(t.slugOf(c)));
    await t.orch.idle();
    expect(t.orch.capacity.waiting()).toEqual([]);
    expect(t.store.openEvents()).toEqual([]);
  });

  it('ends the turn after signal_done and a short grace, and the record says it signalled', async () => {
    const t = setup({ doneGraceMs: 100 });
    const { n, slug } = await t.launched();
    t.runner.agent(slug).done('success', 'all fixed');
    // The agent lingers; the orchestrator stops it after the grace.
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.runner.calls).toContain(`stop ${slug}`);
    const [record] = t.records(slug);
    expect(record).toMatchObject({
      done: { status: 'success', summary: 'all fixed' },
      watchdogFired: null,
    });
  });

  it('learns a PR as the agent opens it: a comment on it in turn one, parked until then, resumes the bottle after the turn', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    // The human comments on the PR the agent is about to open, before anyone knows it is ours.
    expect(await t.orch.accept(t.ev.comment(12, 'please add a test'))).toBe(true);
    expect(t.store.openEvents().map((e) => e.state)).toEqual(['parked']);
    expect(t.logs.some((l) => l['msg'] === 'event parked until a bottle claims its PR')).toBe(true);
    // The agent opens it: the PR is learned while the turn runs and the comment is routed.
    t.runner.agent(slug).openPr(12);
    await until('routed', () => t.store.openEvents().every((e) => e.state === 'deferred'));
    expect(t.row(n)?.prNumber).toBe(12);
    // A later comment is routed at once (an indexed lookup, no parking).
    await t.orch.accept(t.ev.comment(12, 'and docs'));
    await t.orch.idle();
    expect(t.store.openEvents().map((e) => e.state)).toEqual(['deferred', 'deferred']);
    t.finish(slug);
    await until('resumed', () => t.runner.calls.some((c) => c.startsWith(`resume ${slug}`)));
    expect(t.runner.calls.find((c) => c.startsWith('resume'))).toBe(
      `resume ${slug} ${said(12, 'please add a test')}\n\n${said(12, 'and docs')}`,
    );
    await t.orch.idle();
    expect(t.store.openEvents()).toEqual([]);
    // With no agent at work that could claim it, a comment on someone else's PR is not parked.
    await until('turn two running', () => t.runner.isRunning(slug));
    t.runner.agent(slug).exit(0);
    await until('frozen again', () => t.row(n)?.status === 'frozen');
    expect(await t.orch.accept(t.ev.comment(999, 'unrelated'))).toBe(true);
    expect(t.store.openEvents()).toEqual([]);
    expect(t.logs.some((l) => l['msg'] === 'event not about a bottle')).toBe(true);
  });

  it('expires a parked event once no running bottle could claim its PR, and keeps the row’s check-in true', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    const launchedAt = t.row(n)!.lastCheckinAt;
    t.runner.agent(slug).checkin();
    await until('check-in on the row', () => t.row(n)!.lastCheckinAt !== launchedAt);
    expect(t.row(n)!.lastCheckinAt).toBe((await readTurnLog(t.runner.storage, slug)).lastCheckinAt);
    await t.orch.accept(t.ev.comment(44, 'on a PR the agent never opens'));
    expect(t.store.openEvents().map((e) => e.state)).toEqual(['parked']);
    t.runner.agent(slug).exit(0);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await t.orch.checkWatchdog();
    expect(t.store.openEvents()).toEqual([]);
  });

  it('stops an agent whose PR is closed mid-turn, records the turn, then destroys the bottle', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    t.runner.agent(slug).openPr(30);
    await until('PR learned', () => t.row(n)?.prNumber === 30);
    const began = Date.now();
    await t.orch.accept(t.ev.closed(30));
    await until('destroyed', () => t.row(n)?.status === 'destroyed');
    expect(Date.now() - began).toBeLessThan(2000);
    expect(t.runner.calls.slice(-2)).toEqual([`stop ${slug}`, `destroy ${slug}`]);
    const [record] = t.records(slug);
    expect(record?.watchdogFired).toMatchObject({ reason: 'closed' });
    expect(record?.forge?.prs).toEqual([30]);
  });

  it('keeps comments that wait behind a running turn across a restart, and delivers them in order', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    t.runner.agent(slug).openPr(5);
    await until('PR learned', () => t.row(n)?.prNumber === 5);
    await t.orch.accept(t.ev.comment(5, 'first'));
    await t.orch.accept(t.ev.comment(5, 'second'));
    await t.orch.idle();
    // The orchestrator stops (killed: nothing flushed beyond what is durable); the agent works on.
    t.orch.close();
    const again = new Orchestrator({ ...t.options, log: () => {} });
    cleanups.push(() => again.close());
    const report = await reconcile(again, { store: t.store, runner: t.runner });
    expect(report).toMatchObject({ reattached: [slug], replayed: 2, neverStarted: [] });
    t.finish(slug);
    await until('resumed', () => t.runner.calls.some((c) => c.startsWith(`resume ${slug}`)));
    expect(t.runner.calls.filter((c) => c.startsWith('resume'))).toEqual([
      `resume ${slug} ${said(5, 'first')}\n\n${said(5, 'second')}`,
    ]);
    await again.idle();
    expect(t.store.openEvents()).toEqual([]);
  });

  it('never wedges on a failed launch: a forge read or a start that fails leaves the issue launchable, and the retry launches it', async () => {
    const t = setup();
    const n = t.issue();
    let reads = 0;
    t.beforeReadIssue(() => {
      if (++reads === 1) throw new BbError('FORGE_UNAVAILABLE', 'Gitea answered 502');
    });
    t.runner.failNext('launch');
    await t.orch.accept(t.ev.targeted(n));
    await until('launched on a retry', () => t.runner.isRunning(t.slugOf(n)));
    // The first attempt failed at the read, the second at the start, the third ran.
    expect(t.runner.calls.filter((c) => c.startsWith('launch'))).toHaveLength(2);
    expect(t.logs.filter((l) => String(l['msg']).startsWith('event failed'))).toHaveLength(2);
    expect(t.row(n)?.status).toBe('running');
    await t.orch.idle();
    expect(t.store.openEvents()).toEqual([]);
  });

  it('keeps a bottle whose resume fails frozen with its comments, and tries again', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    t.finish(slug, 3);
    await until('frozen', () => t.row(n)?.status === 'frozen' && t.row(n)?.prNumber === 3);
    t.runner.failNext('resume');
    await t.orch.accept(t.ev.comment(3, 'one more thing'));
    await until('resumed on a retry', () => t.runner.isRunning(slug));
    expect(t.runner.calls.filter((c) => c.startsWith('resume'))).toEqual([
      `resume ${slug} ${said(3, 'one more thing')}`,
      `resume ${slug} ${said(3, 'one more thing')}`,
    ]);
    expect(t.logs.some((l) => l['msg'] === 'resume failed')).toBe(true);
  });

  it('keeps the evidence of a failed turn: the bottle stays frozen with a record of the failure', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    t.runner.agent(slug).comment();
    t.runner.agent(slug).exit(1);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.runner.calls).not.toContain(`destroy ${slug}`);
    const [record] = t.records(slug);
    expect(record).toMatchObject({
      turn: 1,
      exitCode: 1,
      watchdogFired: { reason: 'exit_without_signal' },
    });
    expect(record?.opLog.entries).toHaveLength(1);
    expect(existsSync(t.runner.dir(slug))).toBe(true);
  });

  it('fires the watchdog on silence and on a lost sidecar, and records why', async () => {
    const t = setup({ watchdogTimeoutMs: 200 });
    const [quiet, lost] = [t.issue(), t.issue()];
    await t.orch.accept(t.ev.targeted(quiet));
    await t.orch.accept(t.ev.targeted(lost));
    await until('running', () => t.runner.runningSlugs.length === 2);
    const [q, l] = [t.slugOf(quiet), t.slugOf(lost)];
    t.runner.agent(l).removeSidecar();
    await until('sidecar loss noticed', () => t.row(lost)?.status === 'frozen');
    expect(t.records(l)[0]?.watchdogFired).toMatchObject({
      reason: 'sidecar_death',
      detail: "the gate container (the forge sidecar's) was removed",
    });
    // Check-ins count: a bottle that checked in recently is left alone.
    t.runner.agent(q).checkin();
    await until(
      'check-in read',
      async () => (await readTurnLog(t.runner.storage, q)).lastCheckinAt !== undefined,
    );
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(q)).toBe(true);
    await t.silenceFires(quiet, q);
    expect(t.row(quiet)?.lastCheckinAt).toBe(
      (await readTurnLog(t.runner.storage, q)).lastCheckinAt ?? t.row(quiet)?.lastCheckinAt,
    );
  });

  it('decides on the issue as the forge has it now, not on the delivery', async () => {
    const t = setup();
    const untargeted = t.world.addIssue(OWNER, REPO, { title: 'x', author: 'alice' });
    await t.orch.accept(t.ev.targeted(untargeted)); // the payload says targeted; the forge says not
    const targeted = t.issue();
    await t.orch.accept(t.ev.targeted(targeted, { labels: [], assignees: [] })); // stale payload
    await t.orch.idle();
    expect(t.runner.calls).toEqual([`launch ${t.slugOf(targeted)}`]);
    expect(t.row(untargeted)).toBeUndefined();
  });

  it('reads the issue once per launch: the read that targeted it gives the agent its title and body', async () => {
    const t = setup();
    const n = t.issue('make the widget blue');
    let reads = 0;
    t.beforeReadIssue(() => {
      reads++;
    });
    await t.orch.accept(t.ev.targeted(n));
    await until('launched', () => t.runner.isRunning(t.slugOf(n)));
    expect(reads).toBe(1);
    expect(t.runner.launches[0]?.prompt).toContain('make the widget blue');
  });

  it('reconciles a bottle killed before its agent started: removed, and the issue launches again from the inbox', async () => {
    const t = setup();
    const n = t.issue();
    // A launch that never gets past its start (the orchestrator is killed there).
    let release!: () => void;
    t.runner.holdStart(new Promise<void>((r) => (release = r)));
    await t.orch.accept(t.ev.targeted(n));
    await until('row written', () => t.row(n)?.status === 'running');
    const slug = t.row(n)!.slug;
    t.orch.close();
    const again = new Orchestrator({ ...t.options, log: () => {} });
    cleanups.push(() => again.close());
    const report = await reconcile(again, { store: t.store, runner: t.runner });
    expect(report.neverStarted).toEqual([slug]);
    expect(report.replayed).toBe(1);
    await until('launched again', () =>
      t.runner.calls.some((c) => c.startsWith('launch ') && c !== `launch ${slug}`),
    );
    release();
    await again.idle();
    expect(t.row(n)?.slug).not.toBe(slug);
  });

  it('watches again a bottle whose row says running but whose wait was lost', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    t.orch.close();
    const again = new Orchestrator({ ...t.options, log: () => {} });
    cleanups.push(() => again.close());
    expect(again.running).toEqual([]);
    await again.checkWatchdog();
    expect(again.running).toEqual([slug]);
    t.finish(slug);
    await until('frozen', () => t.row(n)?.status === 'frozen');
  });

  it('counts a warm bottle in the budget, cools it when its window ends, and resumes it inside the window', async () => {
    const t = setup({ capacity: { memoryBudget: 8 * GiB } });
    t.runner.warm = { ms: 300, bytes: 100 * 1024 ** 2 };
    const { slug } = await t.launched();
    t.finish(slug, 12);
    await until('warm', () => t.orch.capacity.warm().length === 1);
    expect(t.orch.capacity.warm()).toEqual([{ slug, bytes: 100 * 1024 ** 2 }]);
    expect(t.orch.capacity.used).toBe(100 * 1024 ** 2);
    // A comment inside the window: the warm bottle is resumed, never cooled.
    await t.orch.accept(t.ev.comment(12, 'one more thing'));
    await until('resumed', () => t.runner.calls.some((c) => c.startsWith(`resume ${slug}`)));
    expect(t.orch.capacity.warm()).toEqual([]);
    expect(t.orch.capacity.isRunning(slug)).toBe(true);
    t.finish(slug);
    await until('warm again', () => t.orch.capacity.warm().length === 1);
    // Nobody comments: when its window ends it is cooled, and counts no more.
    await until('cooled', () => t.runner.calls.includes(`cool ${slug}`));
    expect(t.runner.calls.filter((c) => c === `cool ${slug}`)).toHaveLength(1);
    expect(t.orch.capacity.warm()).toEqual([]);
    expect(t.orch.capacity.used).toBe(0);
    expect(
      t.logs.some((l) => l['msg'] === 'warm bottle cooled' && l['why'] === 'its warm window ended'),
    ).toBe(true);
  });

  it('cools warm bottles, the longest warm first, when a launch needs their room', async () => {
    const t = setup({ capacity: { memoryBudget: 2 * GiB } });
    t.runner.warm = { ms: 60_000, bytes: 800 * 1024 ** 2 };
    const [a, b, c] = [t.issue(), t.issue(), t.issue()];
    for (const n of [a, b]) {
      await t.orch.accept(t.ev.targeted(n));
      await until('running', () => t.runner.isRunning(t.slugOf(n)));
      t.runner.agent(t.slugOf(n)).done();
      t.runner.agent(t.slugOf(n)).exit(0);
      await until('warm', () => t.orch.capacity.warm().some((w) => w.slug === t.slugOf(n)));
    }
    expect(t.orch.capacity.used).toBe(1600 * 1024 ** 2);
    // 1.6 GiB held warm + 1 GiB for the new bottle is over 2 GiB: the older warm one goes.
    await t.orch.accept(t.ev.targeted(c));
    await until('launched', () => t.runner.isRunning(t.slugOf(c)));
    expect(t.runner.calls.filter((x) => x.startsWith('cool '))).toEqual([`cool ${t.slugOf(a)}`]);
    expect(t.runner.calls.indexOf(`cool ${t.slugOf(a)}`)).toBeLessThan(
      t.runner.calls.indexOf(`launch ${t.slugOf(c)}`),
    );
    expect(t.orch.capacity.warm().map((w) => w.slug)).toEqual([t.slugOf(b)]);
    // A shutdown cools the rest: nothing stays paused with nobody to resume it.
    await t.orch.coolAll();
    expect(t.runner.calls).toContain(`cool ${t.slugOf(b)}`);
    expect(t.orch.capacity.warm()).toEqual([]);
    t.runner.agent(t.slugOf(c)).exit(0);
  });

  it('a restart cools the bottles the process before kept warm', async () => {
    const t = setup();
    t.runner.warm = { ms: 60_000, bytes: 1024 ** 2 };
    const { slug } = await t.launched();
    t.finish(slug);
    await until('warm', () => t.orch.capacity.warm().length === 1);
    t.orch.close();
    const again = new Orchestrator({ ...t.options, log: () => {} });
    cleanups.push(() => again.close());
    const report = await reconcile(again, { store: t.store, runner: t.runner });
    expect(report.cooled).toEqual([slug]);
    expect(t.runner.calls).toContain(`cool ${slug}`);
    expect(again.capacity.warm()).toEqual([]);
  });
});
