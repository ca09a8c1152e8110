// Two orchestrators sharing one database (real SQLite: state, inbox, leases) and one
// engine (the runner double): each issue is worked on by the holder of its lease.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteLeaseStore } from '@bb/state';
import { describe, expect, it } from 'vitest';
import { Orchestrator } from '../src/orchestrator';
import { issueKey } from '../src/routing';
import { FakeRunner } from './fake-runner';
import { cleanups, OWNER, REPO, setup, until } from './orchestrator-setup';

const TTL = 400;

function fleetOf(
  t: ReturnType<typeof setup>,
  runnerB?: FakeRunner,
  pollMs: { a?: number; b?: number } = {},
) {
  const leases = new SqliteLeaseStore(t.db);
  const logs: { a: Array<Record<string, unknown>>; b: Array<Record<string, unknown>> } = {
    a: [],
    b: [],
  };
  const make = (holder: 'a' | 'b') => {
    const orch = new Orchestrator({
      ...t.options,
      ...(holder === 'b' && runnerB ? { runner: runnerB } : {}),
      fleet: { leases, holder, ttlMs: TTL, heartbeatMs: 100, pollMs: pollMs[holder] ?? 20 },
      watchdogIntervalMs: 100,
      log: (e) => logs[holder].push(e),
    });
    orch.startWatchdog();
    cleanups.push(() => orch.close());
    return orch;
  };
  return { a: make('a'), b: make('b'), logs, leases };
}

/** The keys of these events, in the order the log says they were handled. */
const handledOf = (log: Array<Record<string, unknown>>, keys: string[]) =>
  log
    .filter((e) => e['msg'] === 'event handled')
    .map((e) => e['event'])
    .filter((k) => keys.includes(String(k)));

const launchesOf = (t: ReturnType<typeof setup>) =>
  t.runner.calls.filter((c) => c.startsWith('launch '));

/** Two orchestrators over one database (the setup's own closed); an issue for them. */
function twoOf(runnerB?: FakeRunner, pollMs?: { a?: number; b?: number }) {
  const t = setup();
  t.orch.close();
  const fleet = fleetOf(t, runnerB, pollMs);
  const n = t.issue();
  return { t, ...fleet, n, key: issueKey(OWNER, REPO, n) };
}

/** `a` takes the issue and launches its bottle; its slug. */
async function launchOnA(f: ReturnType<typeof twoOf>): Promise<string> {
  await f.a.accept(f.t.ev.targeted(f.n));
  await until('launched', () => launchesOf(f.t).length === 1);
  return f.a.bottle(f.key)!.slug;
}

describe('orchestrators sharing one database', () => {
  it('work on an issue one at a time: events either accepts go to the holder, and one bottle is launched', async () => {
    const { t, a, b, logs, n, key } = twoOf();
    // The same change delivered to both (a replay with a new key reaches the other).
    await Promise.all([a.accept(t.ev.targeted(n)), b.accept(t.ev.targeted(n))]);
    await until('launched', () => launchesOf(t).length === 1);
    const holder = a.fleet.held.includes(key) ? a : b;
    const other = holder === a ? b : a;
    expect(other.fleet.held).not.toContain(key);
    const slug = holder.bottle(key)!.slug;
    t.finish(slug, 70);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    // A reply reaches the orchestrator that does not hold the issue: the holder resumes.
    await other.accept(t.ev.comment(70, 'one more thing'));
    await until('resumed', () => t.runner.resumes.length === 1);
    await new Promise((r) => setTimeout(r, 200));
    expect(launchesOf(t)).toHaveLength(1);
    expect(t.runner.resumes).toHaveLength(1);
    const holderLog = holder === a ? logs.a : logs.b;
    expect(holderLog.some((e) => e['msg'] === 'bottle resumed')).toBe(true);
    expect((holder === a ? logs.b : logs.a).some((e) => e['msg'] === 'bottle resumed')).toBe(false);
  });

  it("handles an issue's events in the forge's order, those another accepted and the holder has not read yet included", async () => {
    // a reads what others accepted only at its next poll, which does not come here.
    const f = twoOf(undefined, { a: 60_000 });
    const { t, a, b, logs, n } = f;
    const slug = await launchOnA(f);
    t.finish(slug, 71);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    const older = t.ev.comment(71, 'first, through b');
    const newer = t.ev.comment(71, 'then, through a');
    expect(older.occurredAt < newer.occurredAt).toBe(true);
    // b does not hold the issue: it only stores the event. a, the holder, gets the later one.
    await b.accept(older);
    await a.accept(newer);
    const handled = () => handledOf(logs.a, [older.key, newer.key]);
    await until('both handled', () => handled().length === 2);
    expect(handled()).toEqual([older.key, newer.key]);
    expect(logs.b.some((e) => e['msg'] === 'event handled' && e['event'] === older.key)).toBe(
      false,
    );
  });

  it('an older event queued while a newer one is being taken up goes first', async () => {
    const f = twoOf(undefined, { a: 60_000 });
    const { t, a, logs, n } = f;
    const slug = await launchOnA(f);
    t.finish(slug, 71);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    const older = t.ev.comment(71, 'first, reaching a late');
    const newer = t.ev.comment(71, 'then, reaching a at once');
    expect(older.occurredAt < newer.occurredAt).toBe(true);
    // a's read of the issue's open events (taking the newer one up) is slow: it answers
    // with what was there when it began, after the older one was queued.
    const inbox = t.options.inbox;
    const read = inbox.openEventsOf!.bind(inbox);
    let reading: (() => void) | undefined;
    let held = false;
    inbox.openEventsOf = async (issue) => {
      const open = await read(issue);
      if (!held) {
        held = true;
        await new Promise<void>((r) => {
          reading = r;
        });
      }
      return open;
    };
    await a.accept(newer);
    await until('reading', () => reading !== undefined);
    await a.accept(older);
    reading!();
    const handled = () => handledOf(logs.a, [older.key, newer.key]);
    await until('both handled', () => handled().length === 2);
    expect(handled()).toEqual([older.key, newer.key]);
  });

  it('one that takes an issue over for a newer event handles the older open ones first', async () => {
    // b looks at the inbox only when an event reaches it.
    const f = twoOf(undefined, { b: 60_000 });
    const { t, a, b, logs, n, key } = f;
    const slug = await launchOnA(f);
    t.finish(slug, 71);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    // a accepted an event and was killed before it handled it: it is open in the inbox.
    const older = t.ev.comment(71, 'accepted by a, never handled');
    a.close();
    await t.options.inbox.accept(older.key, {
      issue: key,
      occurredAt: older.occurredAt,
      payload: older,
      deliveryId: older.deliveryId,
      kind: older.kind,
    });
    await new Promise((r) => setTimeout(r, TTL + 100));
    const newer = t.ev.comment(71, 'then, through b');
    expect(older.occurredAt < newer.occurredAt).toBe(true);
    await b.accept(newer);
    const handled = () => handledOf(logs.b, [older.key, newer.key]);
    await until('both handled', () => handled().length === 2, TTL * 10);
    expect(handled()).toEqual([older.key, newer.key]);
  });

  it('take over from one that stops: within its lease time the other watches its running turn, records it and goes on', async () => {
    const f = twoOf();
    const { t, a, b, logs, n, key } = f;
    const slug = await launchOnA(f);
    expect(a.fleet.held).toContain(key);
    // a stops as a killed process would: no release, no more renewals.
    const stopped = Date.now();
    a.close();
    await until('taken over', () => b.fleet.held.includes(key), TTL * 5);
    const took = Date.now() - stopped;
    expect(took).toBeLessThan(TTL + 100 + 300);
    expect(logs.b.find((e) => e['msg'] === 'lease taken over')).toMatchObject({ key, from: 'a' });
    expect(b.running).toEqual([slug]);
    // The turn a started ends: b records it and freezes the bottle.
    t.finish(slug, 71);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await until('recorded', () => t.records(slug).length === 1);
    await b.accept(t.ev.comment(71, 'carry on'));
    await until('resumed by b', () => t.runner.resumes.length === 1);
    expect(launchesOf(t)).toHaveLength(1);
  });

  it('one that was paused past its lease lets the issue go, and does nothing more with it', async () => {
    const f = twoOf();
    const { t, a, b, logs, key } = f;
    const slug = await launchOnA(f);
    a.stopWatchdog();
    await until('taken over', () => b.fleet.held.includes(key), TTL * 5);
    // a wakes up: its renewal finds the lease gone; it stops watching the turn.
    a.startWatchdog();
    await until('let go', () => logs.a.some((e) => e['msg']?.toString().startsWith('lease lost')));
    expect(a.fleet.held).not.toContain(key);
    expect(a.running).toEqual([]);
    expect(b.running).toEqual([slug]);
    t.finish(slug);
    await until('recorded once', () => t.records(slug).length === 1);
    await new Promise((r) => setTimeout(r, 200));
    expect(t.records(slug)).toHaveLength(1);
  });

  it('one that stalled mid-launch past its lease writes nothing over the bottle its successor made', async () => {
    const { t, a, b, logs, n, key } = twoOf();
    let go!: () => void;
    t.runner.holdStart(new Promise<void>((r) => (go = r)));
    await a.accept(t.ev.targeted(n));
    await until('a launching', () => launchesOf(t).length === 1);
    const first = a.bottle(key)!.slug;
    a.stopWatchdog();
    // b takes the issue over: the half-made bottle is removed and launched again.
    await until('b launched again', () => launchesOf(t).length === 2, TTL * 8);
    const second = b.bottle(key)!.slug;
    expect(second).not.toBe(first);
    expect(t.runner.calls).toContain(`destroy ${first}`);
    // a wakes: its launch goes on, its agent works and stops; a writes no row.
    go();
    await until('a watching its bottle', () => a.running.includes(first));
    t.finish(first);
    await new Promise((r) => setTimeout(r, TTL));
    expect(t.row(n)?.slug).toBe(second);
    expect(t.row(n)?.status).toBe('running');
    expect(logs.a.some((e) => e['msg'] === 'bottle launched')).toBe(true);
  });

  it('a bottle of another machine is left alone: not watched, not removed', async () => {
    // b sees another BB_HOME: no trace of a's bottles.
    const elsewhere = mkdtempSync(join(tmpdir(), 'bb-elsewhere-'));
    cleanups.push(() => rmSync(elsewhere, { recursive: true, force: true }));
    const f = twoOf(new FakeRunner(elsewhere));
    const { t, a, b, logs, n, key } = f;
    const slug = await launchOnA(f);
    a.close();
    await until(
      'b looked',
      () =>
        logs.b.some((e) => e['msg'] === 'bottle not on this machine: left to its own orchestrator'),
      TTL * 8,
    );
    expect(t.row(n)).toMatchObject({ slug, status: 'running' });
    expect(t.runner.calls).not.toContain(`destroy ${slug}`);
    expect(b.running).toEqual([]);
    expect(b.fleet.held).not.toContain(key);
  });
});
