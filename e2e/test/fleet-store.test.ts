// Bottles outlive their machine: three `bb orchestrate serve` replicas, each with its own
// BB_HOME and its own Docker engine (a separate dockerd: its own data root, exec root and
// socket), share one real PostgreSQL and one bottle store (BB_BOTTLE_STORE). One replica
// launches two bottles; then it and its engine die together (SIGKILL, every process of
// its containers too). Another replica takes both issues over: the turn that was running
// is recorded once as lost and its bottle frozen from its files; the next event resumes
// each bottle on the new replica's engine with its workspace, and the one whose turn
// finished with its conversation. PostgreSQL restarts once on the way. When the dead
// machine comes back, nothing of it is left on its engine. Then a replica stalls past its
// lease (SIGSTOP) while its agent keeps commenting: its gate refuses every call once its
// hold runs out (the op log shows nothing sent after), another replica takes the issue,
// and the stalled one, woken (SIGCONT), removes what it ran and writes nothing.
import { execFile } from 'node:child_process';
import { readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { verifyOpLogFile } from '@bb/forge-sidecar';
import { unmountAllUnder } from '@bb/headless';
import { PostgresDatabase } from '@bb/state-postgres';
import { postgresSkipReason } from '@bb/state-postgres/testing';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enginesSkipReason } from './engines';
import { type Replica, type StoreFleet, storeFleet } from './store-fleet';
import { fileIssue, prTurn, scriptAgent, until } from './support';

const run = promisify(execFile);
const docker = await probeDocker();
const noPostgres = postgresSkipReason();
// Under BB_REQUIRE_DOCKER=1 (CI) a machine that cannot start engines fails instead of skipping.
const noEngines = docker.ok ? enginesSkipReason() : undefined;
if (noEngines && process.env['BB_REQUIRE_DOCKER'] === '1')
  throw new Error(`BB_REQUIRE_DOCKER=1 but the store test cannot run: ${noEngines}`);
const skip = !docker.ok ? docker.reason : (noPostgres ?? noEngines);

const TTL_MS = 3000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Opens a PR; next turn checks its file is there, commits on top and says what it remembers. */
const quick = scriptAgent([
  prTurn(),
  {
    steps: [
      { do: 'sh', cmd: 'test "$(cat fix.txt)" = fixed' },
      { do: 'write', path: 'more.txt', content: 'more\n' },
      { do: 'commit', message: 'More' },
      { do: 'push' },
      { do: 'comment', body: 'Turn {{turn}}: I remember "{{previousPrompts}}"' },
      { do: 'done', status: 'success', summary: 'Pushed more.' },
    ],
  },
]);
/** Writes a note, says "Starting." and works for ten minutes; next turn checks the note. */
const slow = scriptAgent([
  prTurn({
    before: [
      { do: 'write', path: 'notes.txt', content: 'noted\n' },
      { do: 'comment', body: 'Starting.' },
      { do: 'sleep', ms: 600_000 },
    ],
  }),
  {
    steps: [
      { do: 'sh', cmd: 'test "$(cat notes.txt)" = noted' },
      { do: 'comment', body: 'Turn {{turn}}: I remember "{{previousPrompts}}"' },
      { do: 'done', status: 'success', summary: 'Carried on.' },
    ],
  },
]);

/**
 * Says "Ticking.", then posts a comment every few tenths of a second for half a minute
 * and more, going on when one is refused; next turn says it is back.
 */
const ticker = scriptAgent([
  {
    steps: [
      { do: 'comment', body: 'Ticking.' },
      {
        do: 'sh',
        cmd: 'i=0; while [ $i -lt 90 ]; do i=$((i+1)); node /opt/bb/bb-forge.mjs comment {{issue}} "tick $i" >/dev/null 2>&1 || echo "refused $i"; sleep 0.3; done',
        mayFail: true,
      },
      { do: 'done', status: 'success', summary: 'Ticked.' },
    ],
  },
  {
    steps: [
      { do: 'comment', body: 'Turn {{turn}}: back.' },
      { do: 'done', status: 'success', summary: 'Back.' },
    ],
  },
]);

describe.skipIf(!!skip)(
  `bottles outlive their machine: three replicas, three engines, one store${skip ? ` (skipped: ${skip})` : ''}`,
  () => {
    let fleet: StoreFleet;

    beforeAll(async () => {
      fleet = await storeFleet({
        ids: ['r1', 'r2', 'r3'],
        agents: { quick, slow, ticker },
        ttlMs: TTL_MS,
      });
      // r1 alone at first: its machine launches the bottles; r2 and r3 join after.
      await fleet.start(fleet.replicas[0]!);
    }, 240_000);

    afterAll(async () => {
      await fleet?.close();
    }, 180_000);

    it('resumes a dead machine’s bottles on another engine, its lost turn recorded once; a stalled replica’s agent writes nothing after its lease', async () => {
      const { pg, gitea, store, root, replicas, start, kill, containersOn, engineOf, logLines } =
        fleet;
      const db = await PostgresDatabase.open({ url: pg.url, max: 2 });
      const q = async <T extends Record<string, unknown>>(sql: string, args: unknown[] = []) =>
        (await db.query<T>('store check', sql, args)).rows;
      const row = async (n: number) =>
        (
          await q<{ slug: string; status: string; pr_number: number | null }>(
            'SELECT slug, status, pr_number FROM forge_state WHERE issue_number = $1',
            [n],
          )
        )[0];
      const records = async (slug: string) =>
        Number(
          (
            await q<{ n: string }>('SELECT count(*) AS n FROM provenance_records WHERE slug = $1', [
              slug,
            ])
          )[0]!.n,
        );
      const comments = (n: number) => gitea.issue('acme/widgets', n).comments.map((c) => c.body);
      const metaOf = (slug: string) =>
        JSON.parse(readFileSync(join(store, slug, 'meta.json'), 'utf8')) as {
          engine?: string;
          status: string;
        };
      const [r1, r2, r3] = replicas as [Replica, Replica, Replica];
      try {
        // ---- r1's machine launches both: one turn done, one still working
        const a = fileIssue(gitea, 'quick', 'Fix A', 'A is broken.');
        const fa = await until(
          'A to freeze with its PR',
          async () => {
            const r = await row(a);
            return r?.status === 'frozen' && r.pr_number ? r : undefined;
          },
          120_000,
        );
        const b = fileIssue(gitea, 'slow', 'Fix B', 'B is broken.');
        await until(
          'B to start',
          () => (comments(b).includes('Starting.') ? true : undefined),
          120_000,
        );
        const slugB = (await row(b))!.slug;
        expect(metaOf(fa.slug).engine).toBe(engineOf(r1));
        expect(metaOf(slugB)).toMatchObject({ engine: engineOf(r1), status: 'running' });
        // B's agent and gate run there; A, frozen, has none.
        expect((await containersOn(r1.engine)).sort()).toEqual(
          [`bb-${slugB}-agent`, `bb-${slugB}-gate`].sort(),
        );
        await Promise.all([start(r2), start(r3)]);

        // ---- r1 and its engine die together
        const killedAt = Date.now();
        await kill(r1);
        await r1.engine.die();
        // Its kernel's mounts of the bottle disks end with it, and what only its own disk
        // held (its repository mirror, which the workspaces borrow objects from) is out of
        // reach until it is back.
        await unmountAllUnder(join(r1.home, 'mounts'));
        renameSync(join(r1.home, 'mirrors'), join(root, 'r1-mirrors-while-down'));

        // ---- another replica takes B over: the lost turn recorded once, said once
        const lostSaid = 'The machine running the agent stopped before its turn ended';
        await until(
          'B’s lost turn to be said on the issue',
          () => (comments(b).some((c) => c.startsWith(lostSaid)) ? true : undefined),
          60_000,
        );
        const takeoverMs = Date.now() - killedAt;
        console.log(`takeover: ${takeoverMs} ms from kill -9 to the lost turn's comment`);
        // Lease TTL, one renewal period, a scan: well inside this on 2 loaded cores.
        expect(takeoverMs).toBeLessThan(TTL_MS * 2 + 15_000);
        await until('B frozen', async () =>
          (await row(b))?.status === 'frozen' ? true : undefined,
        );
        expect(await records(slugB)).toBe(1);
        expect(metaOf(slugB).status).toBe('frozen');

        // ---- PostgreSQL goes away and comes back
        await pg.restart(1500);

        // ---- the next event resumes each on the engine of the replica that holds it
        gitea.comment('alice', 'acme/widgets', a, 'Please carry on with A.');
        await until(
          'A’s second turn',
          () => (comments(a).some((c) => c.startsWith('Turn 2: I remember')) ? true : undefined),
          120_000,
        );
        // Its conversation came along: it remembers its first prompt.
        expect(comments(a).find((c) => c.startsWith('Turn 2: I remember'))).toMatch(
          /I remember "[\s\S]*Fix A[\s\S]*"/,
        );
        gitea.comment('alice', 'acme/widgets', b, 'Please carry on with B.');
        await until(
          'B’s second turn',
          () => (comments(b).some((c) => c.startsWith('Turn 2: I remember')) ? true : undefined),
          120_000,
        );
        await until('both frozen again', async () =>
          (await row(a))?.status === 'frozen' && (await row(b))?.status === 'frozen'
            ? true
            : undefined,
        );
        const moved = [engineOf(r2), engineOf(r3)];
        expect(moved).toContain(metaOf(fa.slug).engine);
        expect(moved).toContain(metaOf(slugB).engine);
        // A's workspace came along: its second commit is on top of its first, on the forge.
        const branch = (
          await run('git', [
            `--git-dir=${gitea.git.dirOf('acme', 'widgets')}`,
            'log',
            '--format=%s',
            '-3',
            `refs/heads/bb/quick-${a}`,
          ])
        ).stdout.trim();
        expect(branch.split('\n').slice(0, 2)).toEqual(['More', 'Fix']);

        // ---- every event acted on once, every turn recorded once
        expect(comments(a).filter((c) => c === 'PR is up.')).toHaveLength(1);
        expect(comments(a).filter((c) => c.startsWith('Turn 2:'))).toHaveLength(1);
        expect(comments(b).filter((c) => c === 'Starting.')).toHaveLength(1);
        expect(comments(b).filter((c) => c.startsWith(lostSaid))).toHaveLength(1);
        expect(comments(b).filter((c) => c.startsWith('Turn 2:'))).toHaveLength(1);
        expect(await records(fa.slug)).toBe(2);
        expect(await records(slugB)).toBe(2);
        const open = await q("SELECT 1 FROM event_inbox WHERE state <> 'done'");
        expect(open).toHaveLength(0);

        // ---- the dead machine comes back: what its engine still had of B goes
        renameSync(join(root, 'r1-mirrors-while-down'), join(r1.home, 'mirrors'));
        await r1.engine.start();
        await start(r1);
        await until(
          'r1 to clear its engine',
          async () => ((await containersOn(r1.engine)).length === 0 ? true : undefined),
          60_000,
        );
        for (const r of [r2, r3]) expect(await containersOn(r.engine)).toEqual([]);
        expect(
          logLines().filter(
            (l) =>
              l['msg'] ===
              'bottle ran on another engine: its turn is recorded as lost, it resumes here',
          ),
        ).toHaveLength(1);

        // ---- a replica stalls past its lease (SIGSTOP) while its agent keeps writing
        const c = fileIssue(gitea, 'ticker', 'Fix C', 'C is broken.');
        const ticks = () => comments(c).filter((t) => /^tick \d+$/.test(t)).length;
        await until('C to tick', () => (ticks() >= 2 ? true : undefined), 120_000);
        const slugC = (await row(c))!.slug;
        const stalled = replicas.find((r) => engineOf(r) === metaOf(slugC).engine)!;
        stalled.proc!.kill('SIGSTOP');
        const stalledAt = Date.now();
        await until(
          'C’s lost turn to be said by another replica',
          () => (comments(c).some((t) => t.startsWith(lostSaid)) ? true : undefined),
          60_000,
        );
        const takenMs = Date.now() - stalledAt;
        console.log(`stall takeover: ${takenMs} ms from SIGSTOP to the lost turn's comment`);
        // Its agent runs on, on an engine nobody stopped: its gate refuses what it writes.
        const ticksAtTakeover = ticks();
        await sleep(3000);
        expect(ticks()).toBe(ticksAtTakeover);
        stalled.proc!.kill('SIGCONT');
        // Awake, it finds its lease gone and removes what its engine runs of C.
        await until(
          `${stalled.id} to let C go`,
          async () =>
            (await containersOn(stalled.engine)).some((n) => n.includes(slugC)) ? undefined : true,
          60_000,
        );
        expect(ticks()).toBe(ticksAtTakeover);
        expect(comments(c).filter((t) => t.startsWith(lostSaid))).toHaveLength(1);
        // The op log, whole: every comment its gate sent went out before its hold ran out
        // (within a lease of the stall), and nothing after (a gate not held writes nothing
        // there: the log may be the new holder's).
        const ops = verifyOpLogFile(join(store, slugC, 'state', 'ops.jsonl'));
        expect(ops.ok).toBe(true);
        const sent = ops.entries.filter((e) => e.method === 'post_comment' && e.outcome === 'ok');
        expect(sent).toHaveLength(ticksAtTakeover + 1);
        for (const e of sent) expect(Date.parse(e.time)).toBeLessThanOrEqual(stalledAt + TTL_MS);
        // The next event resumes C under its new holder, whose gate writes.
        gitea.comment('alice', 'acme/widgets', c, 'Please carry on with C.');
        await until(
          'C’s second turn',
          () => (comments(c).includes('Turn 2: back.') ? true : undefined),
          120_000,
        );
        await until('C frozen', async () =>
          (await row(c))?.status === 'frozen' ? true : undefined,
        );
        expect(metaOf(slugC).engine).not.toBe(engineOf(stalled));
        expect(await records(slugC)).toBe(2);
        for (const r of replicas)
          await until(
            `${r.id}'s engine to hold no bottle`,
            async () => ((await containersOn(r.engine)).length === 0 ? true : undefined),
            60_000,
          );
      } finally {
        await db.close();
      }
    }, 600_000);
  },
);
