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

/** A write one orchestrator made, with when (performance.now()). */
interface Write {
  at: number;
  what: string;
}

/** `target` with `methods` recorded in `writes` as they are called. */
function recorded<T extends object>(
  target: T,
  methods: string[],
  name: string,
  writes: Write[],
): T {
  return new Proxy(target, {
    get(obj, prop, recv) {
      const v = Reflect.get(obj, prop, recv);
      if (typeof v !== 'function') return v;
      if (!methods.includes(String(prop))) return v.bind(obj);
      return (...args: unknown[]) => {
        writes.push({ at: performance.now(), what: `${name}.${String(prop)}` });
        return v.apply(obj, args);
      };
    },
  });
}

const FORGE_WRITES = [
  'postComment',
  'react',
  'addLabels',
  'updateDescription',
  'openPr',
  'openIssue',
  'closeIssue',
];
const ROW_WRITES = ['upsert', 'delete'];

function fleetOf(
  t: ReturnType<typeof setup>,
  runnerB?: FakeRunner,
  pollMs: { a?: number; b?: number } = {},
  /** Record a's forge and row writes, and let a test hold a's turn records. */
  watchA = false,
) {
  const leases = new SqliteLeaseStore(t.db);
  const writes: Write[] = [];
  let recordHold: Promise<void> | undefined;
  let recording = false;
  const store = watchA ? recorded(t.options.store, ROW_WRITES, 'row', writes) : t.options.store;
  const provenance = watchA
    ? {
        ...t.options.provenance,
        store: new Proxy(t.options.provenance.store, {
          get(obj, prop, recv) {
            const v = Reflect.get(obj, prop, recv);
            if (typeof v !== 'function') return v;
            if (prop !== 'append') return v.bind(obj);
            return async (...args: unknown[]) => {
              recording = true;
              const hold = recordHold;
              recordHold = undefined;
              await hold;
              // Counted when stored: one the store refuses (its chain moved on) wrote nothing.
              const out = await v.apply(obj, args);
              writes.push({ at: performance.now(), what: 'record.append' });
              return out;
            };
          },
        }),
      }
    : t.options.provenance;
  const logs: { a: Array<Record<string, unknown>>; b: Array<Record<string, unknown>> } = {
    a: [],
    b: [],
  };
  const make = (holder: 'a' | 'b') => {
    const orch = new Orchestrator({
      ...t.options,
      ...(holder === 'b' && runnerB ? { runner: runnerB } : {}),
      ...(holder === 'a' && watchA
        ? {
            store,
            provenance,
            forgeFor: (o: string, r: string) =>
              recorded(t.options.forgeFor!(o, r), FORGE_WRITES, 'forge', writes),
          }
        : {}),
      fleet: { leases, holder, ttlMs: TTL, heartbeatMs: 100, pollMs: pollMs[holder] ?? 20 },
      watchdogIntervalMs: 100,
      log: (e) => logs[holder].push(e),
    });
    orch.startWatchdog();
    cleanups.push(() => orch.close());
    return orch;
  };
  return {
    a: make('a'),
    b: make('b'),
    logs,
    leases,
    /** The moment a wakes from its pause (writes after it are what fencing forbids). */
    wake: () => performance.now(),
    /** a's forge, row and record writes since `since`. */
    writesBy: (_who: 'a', since: number) => writes.filter((w) => w.at >= since).map((w) => w.what),
    /** Make a's next turn record wait for `until`. */
    holdRecordOfA: (until: Promise<void>) => {
      recordHold = until;
    },
    recordingOfA: () => recording,
  };
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
function twoOf(runnerB?: FakeRunner, pollMs?: { a?: number; b?: number }, watchA = false) {
  const t = setup();
  t.orch.close();
  const fleet = fleetOf(t, runnerB, pollMs, watchA);
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

  // Fencing: a paused at a slow step past its lease (b takes the issue meanwhile) and
  // woken makes no forge write, starts no agent and writes no row after it wakes.
  it('one paused mid-launch past its lease starts no agent and writes nothing after it wakes', async () => {
    const f = twoOf(undefined, {}, true);
    const { t, a, b, logs, n, key } = f;
    let go!: () => void;
    t.runner.holdStart(new Promise<void>((r) => (go = r)));
    await a.accept(t.ev.targeted(n));
    await until('a launching', () => launchesOf(t).length === 1);
    const first = a.bottle(key)!.slug;
    a.stopWatchdog();
    // b takes the issue over: the half-made bottle is removed and launched again.
    await until('b launched again', () => t.runner.started.length === 1, TTL * 8);
    const second = b.bottle(key)!.slug;
    expect(second).not.toBe(first);
    const woke = f.wake();
    go();
    await until('a gave up its launch', () => logs.a.some((e) => e['msg'] === 'launch failed'));
    await new Promise((r) => setTimeout(r, TTL));
    expect(t.runner.started).toEqual([second]);
    expect(await t.runner.containers(first)).toEqual([]);
    expect(logs.a.some((e) => e['msg'] === 'bottle launched')).toBe(false);
    expect(t.row(n)).toMatchObject({ slug: second, status: 'running' });
    expect(f.writesBy('a', woke)).toEqual([]);
  });

  it('one paused mid-resume past its lease starts no agent; the comment is heard once, by the new holder', async () => {
    const f = twoOf(undefined, {}, true);
    const { t, a, b, logs, n, key } = f;
    const slug = await launchOnA(f);
    t.finish(slug, 72);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    let go!: () => void;
    t.runner.holdStart(new Promise<void>((r) => (go = r)));
    await a.accept(t.ev.comment(72, 'please also update the docs'));
    await until('a resuming', () => t.runner.resumes.length === 1);
    a.stopWatchdog();
    await until('b took the issue', () => b.fleet.held.includes(key), TTL * 8);
    const woke = f.wake();
    go();
    await until('a let the issue go', () => !a.fleet.held.includes(key) && !a.bottle(key));
    // The comment is b's to act on: one turn hears it, started by b.
    await until('b resumed', () => t.runner.started.length === 2, TTL * 8);
    await new Promise((r) => setTimeout(r, TTL));
    expect(t.runner.started).toEqual([slug, slug]);
    const heard = t.runner.resumes.filter((r) => r.prompt.includes('please also update the docs'));
    expect(heard.length).toBe(2); // a's (stopped at its fence) and b's
    expect(logs.b.some((e) => e['msg'] === 'bottle resumed')).toBe(true);
    expect(logs.a.some((e) => e['msg'] === 'bottle resumed')).toBe(false);
    expect(f.writesBy('a', woke)).toEqual([]);
  });

  it('one paused while it records a turn past its lease leaves it to the new holder: recorded once, no writes after it wakes', async () => {
    const f = twoOf(undefined, {}, true);
    const { t, a, b, n, key } = f;
    const slug = await launchOnA(f);
    let go!: () => void;
    f.holdRecordOfA(new Promise<void>((r) => (go = r)));
    t.finish(slug, 73);
    await until('a recording', () => f.recordingOfA());
    a.stopWatchdog();
    await until('b took the issue', () => b.fleet.held.includes(key), TTL * 8);
    await until('b recorded and froze it', () => t.row(n)?.status === 'frozen', TTL * 8);
    const woke = f.wake();
    go();
    await new Promise((r) => setTimeout(r, TTL * 2));
    expect(t.records(slug)).toHaveLength(1);
    expect(f.writesBy('a', woke)).toEqual([]);
    // b carries on with the issue: a comment wakes the bottle, through b.
    await b.accept(t.ev.comment(73, 'thanks, one more'));
    await until('resumed by b', () => t.runner.started.length === 2);
  });

  it("one paused while it ends a turn of a closed PR past its lease removes nothing after it wakes: the bottle is the new holder's", async () => {
    const f = twoOf(undefined, {}, true);
    const { t, a, b, n, key } = f;
    const slug = await launchOnA(f);
    t.finish(slug, 75);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await a.accept(t.ev.comment(75, 'go on'));
    await until('resumed', () => t.runner.started.length === 2);
    let go!: () => void;
    f.holdRecordOfA(new Promise<void>((r) => (go = r)));
    // The PR is closed while the agent works: its turn ends, and a would destroy the bottle.
    await a.accept(t.ev.closed(75));
    await until('a recording', () => f.recordingOfA());
    a.stopWatchdog();
    await until('b took the issue', () => b.fleet.held.includes(key), TTL * 8);
    await until('b froze it', () => t.row(n)?.status === 'frozen', TTL * 8);
    const since = t.runner.calls.length;
    const woke = f.wake();
    go();
    await new Promise((r) => setTimeout(r, TTL * 3));
    expect(t.runner.calls.slice(since)).not.toContain(`destroy ${slug}`);
    expect(f.writesBy('a', woke)).toEqual([]);
    expect(t.row(n)).toMatchObject({ slug, status: 'frozen' });
  });

  it('a comment waiting for the running turn is heard once when its holder takes the issue up again after its own clock ran the lease out', async () => {
    const f = twoOf();
    const { t, a, b, n, key } = f;
    b.close();
    const slug = await launchOnA(f);
    await a.accept(t.ev.comment(n, 'also check the tests', undefined, { on: 'issue' }));
    await until('waiting for the turn', () => (a.bottle(key)?.state.pending.length ?? 0) === 1);
    // a stalls (no renewals) past its lease; nobody takes it: the database still says a's.
    a.stopWatchdog();
    await until('lapsed here', () => !a.fleet.held.includes(key), TTL * 4);
    // Something else of the issue comes in: a takes the issue up again.
    await a.accept(t.ev.comment(n, 'and the changelog', undefined, { on: 'issue' }));
    await until('both waiting', () => (a.bottle(key)?.state.pending.length ?? 0) >= 2);
    a.startWatchdog();
    t.finish(slug, 74);
    await until('resumed', () => t.runner.resumes.length === 1, TTL * 8);
    const prompt = t.runner.resumes[0]!.prompt;
    expect(prompt.split('also check the tests').length - 1).toBe(1);
    expect(prompt.split('and the changelog').length - 1).toBe(1);
  });

  it("a bottle's gate may write only while its holder renews its hold: a paused holder's hold runs out before the issue can be taken, the new holder renews it", async () => {
    const f = twoOf();
    const { t, a, b, key } = f;
    const slug = await launchOnA(f);
    // The launch's gate starts under a's hold: until a's own deadline on the lease.
    const atLaunch = t.runner.launches[0]!.holdUntil?.();
    expect(atLaunch).toBeGreaterThan(Date.now());
    expect(atLaunch).toBeLessThanOrEqual(Date.now() + TTL);
    await until('a renews it', () => t.runner.holds.some((h) => h.slug === slug));
    // a stalls: no more renewals; b takes the issue once the lease ran out.
    a.stopWatchdog();
    const stalledAt = Date.now();
    await until('taken over', () => b.fleet.held.includes(key), TTL * 5);
    const takenAt = Date.now();
    // a's (a renewal in flight as it stalled included): b cannot hold the issue before
    // the lease a renewed last ran out, a renewal period and more after the stall.
    const ofA = t.runner.holds.filter((h) => h.at < stalledAt + 50);
    expect(ofA.length).toBeGreaterThan(0);
    // Every hold a gave had run out before the lease could change hands.
    for (const h of ofA) expect(h.until).toBeLessThanOrEqual(takenAt);
    // b watches the running turn, and its gate may write again under b's hold.
    await until('b renews it', () =>
      t.runner.holds.some((h) => h.slug === slug && h.at >= takenAt && h.until > Date.now()),
    );
    // a, awake again, finds the lease gone, and its launch's deadline is over.
    a.startWatchdog();
    await until('a let go', () => f.logs.a.some((e) => String(e['msg']).startsWith('lease lost')));
    expect(t.runner.launches[0]!.holdUntil?.()).toBe(0);
  });

  it('one orchestrator alone does not fence its gates', async () => {
    const t = setup();
    const n = t.issue();
    await t.orch.accept(t.ev.targeted(n));
    await until('launched', () => launchesOf(t).length === 1);
    expect(t.runner.launches[0]!.holdUntil?.()).toBeUndefined();
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
