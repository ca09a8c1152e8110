import { randomInt } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { DockerBackend, destroy, HOME_LABEL, homeLabel, listBottles } from '@bb/headless';
import { PostgresDatabase } from '@bb/state-postgres';
import { postgresSkipReason, startPostgres, type TestPostgres } from '@bb/state-postgres/testing';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { worker } from './faults/agents';
import { killServe, type ServeProcess, startServe } from './serve-process';
import { forgeWorld, makeHome, removeHome, until } from './support';

const docker = await probeDocker();
// Missing PostgreSQL skips with the reason shown; under BB_REQUIRE_DOCKER=1 it fails instead.
const noPostgres = postgresSkipReason();

const TOKEN = 'bb-claude-token-chaos-4242';
const SECRET = 'chaos-webhook-secret';
const TTL_MS = 3000;
const HEARTBEAT_MS = TTL_MS / 3;
/** What taking a lease over may add beyond TTL + heartbeat: a scan and its queries, on 2 loaded cores. */
const SCAN_SLACK_MS = 1500;
const ISSUES = 200;
const TARGETED = 12;
const BAD_AGENT = 3;
const ORIGINALS = 850;
const DUPLICATES = 100;
const REPLAYS = 50;

type Replica = ServeProcess;

interface Answer {
  uuid: string;
  replica: string;
  status: number;
  body: { accepted?: boolean; duplicate?: boolean; key?: string; ignored?: string };
  kind: 'original' | 'duplicate' | 'replay';
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(!docker.ok || !!noPostgres)(
  `chaos: three orchestrators, one PostgreSQL, one engine, kill -9 every 10 s${
    !docker.ok ? ` (skipped: ${docker.reason})` : noPostgres ? ` (skipped: ${noPostgres})` : ''
  }`,
  () => {
    let pg: TestPostgres;
    let gitea: GiteaTestServer;
    let lb: Server;
    let home: string;
    let logDir: string;
    const replicas: Replica[] = [];
    const answers: Answer[] = [];
    const replayUuids = new Set<string>();
    /** Deliveries the load balancer is still forwarding (Gitea may have given up waiting). */
    const inFlight = new Set<Promise<unknown>>();
    const backend = new DockerBackend();

    const logLines = (): Array<Record<string, unknown> & { replica: string }> => {
      const out: Array<Record<string, unknown> & { replica: string }> = [];
      for (const r of replicas)
        for (let i = 1; i <= r.starts; i++) {
          let text = '';
          try {
            text = readFileSync(join(logDir, `${r.id}-${i}.log`), 'utf8');
          } catch {
            continue;
          }
          for (const line of text.split('\n'))
            if (line.startsWith('{'))
              try {
                out.push({ ...(JSON.parse(line) as Record<string, unknown>), replica: r.id });
              } catch {
                // a line cut by the kill
              }
        }
      return out;
    };

    const start = (r: Replica) =>
      startServe(
        r,
        {
          PATH: process.env['PATH'],
          ...(process.env['DOCKER_HOST'] ? { DOCKER_HOST: process.env['DOCKER_HOST'] } : {}),
          BB_HOME: home,
          BB_BASE_IMAGE: BASE_IMAGE,
          BB_PORT: String(r.port),
          BB_DATABASE_URL: pg.url,
          BB_REPLICA_ID: r.id,
          BB_LEASE_TTL: `${TTL_MS}ms`,
          BB_WARM_WINDOW: '0',
          FORGE_GITEA_API: gitea.apiUrl,
          FORGE_TOKEN: TOKEN,
          FORGE_WEBHOOK_SECRET: SECRET,
          BB_SWEEP_INTERVAL: '0',
          FORGE_WATCHDOG_INTERVAL: '1s',
          BB_MEMORY_BUDGET: '200g',
        },
        (n) => join(logDir, `${r.id}-${n}.log`),
      );
    const kill = killServe;

    /** Forward one delivery to a live replica picked at random; another when it fails. */
    async function forward(
      headers: IncomingHttpHeaders,
      body: Buffer,
      kind: Answer['kind'],
      not?: string,
    ): Promise<Answer> {
      const uuid = String(headers['x-gitea-delivery']);
      const pass: Record<string, string> = {};
      for (const [k, v] of Object.entries(headers))
        if (typeof v === 'string' && k !== 'host' && k !== 'content-length' && k !== 'connection')
          pass[k] = v;
      for (let attempt = 0; attempt < 400; attempt++) {
        const up = replicas.filter((r) => r.proc && r.id !== not);
        const r = up[randomInt(up.length || 1)];
        if (!r) {
          await sleep(50);
          continue;
        }
        try {
          const res = await fetch(`http://127.0.0.1:${r.port}/webhooks/gitea`, {
            method: 'POST',
            headers: pass,
            body,
            signal: AbortSignal.timeout(10_000),
          });
          const answer: Answer = {
            uuid,
            replica: r.id,
            status: res.status,
            body: (await res.json()) as Answer['body'],
            kind,
          };
          // 503: the state could not be written; the sender tries again.
          if (res.status >= 500) {
            await sleep(50);
            continue;
          }
          answers.push(answer);
          return answer;
        } catch {
          // Killed under the request: another one takes it.
          await sleep(20);
        }
      }
      throw new Error(`delivery ${uuid} reached no orchestrator`);
    }

    beforeAll(async () => {
      pg = await startPostgres({ maxConnections: 300 });
      home = makeHome('bb-chaos-', { worker: worker(0) });
      logDir = mkdtempSync(join(tmpdir(), 'bb-chaos-logs-'));
      const lbPort = await freePort();
      const world = forgeWorld(TOKEN);
      world.users!.push({ login: 'mallory', tokens: ['mallory-token-1234567890'] });
      gitea = await createGiteaTestServer({
        world,
        hooks: [{ url: `http://127.0.0.1:${lbPort}/hook`, secret: SECRET }],
      });
      let originals = 0;
      lb = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          const body = Buffer.concat(chunks);
          const uuid = String(req.headers['x-gitea-delivery']);
          const kind = replayUuids.has(uuid) ? 'replay' : 'original';
          if (kind === 'original') originals++;
          const sending = forward(req.headers, body, kind);
          inFlight.add(sending);
          void sending.finally(() => inFlight.delete(sending)).catch(() => {});
          sending.then(
            (a) => {
              res.writeHead(a.status, { 'content-type': 'application/json' });
              res.end(JSON.stringify(a.body));
              // Some deliveries arrive twice (a proxy's retry): the same id, another orchestrator.
              if (
                kind === 'original' &&
                answers.filter((x) => x.kind === 'duplicate').length < DUPLICATES &&
                randomInt(100) < 15
              ) {
                const again = forward(req.headers, body, 'duplicate', a.replica);
                inFlight.add(again);
                void again.finally(() => inFlight.delete(again)).catch(() => {});
              }
            },
            () => {
              res.writeHead(502);
              res.end();
            },
          );
        });
      });
      await new Promise<void>((r) => lb.listen(lbPort, '127.0.0.1', r));
      void originals;
      for (const id of ['r1', 'r2', 'r3'])
        replicas.push({ id, port: await freePort(), proc: undefined, starts: 0 });
      // The first start migrates; the others find the schema made.
      await start(replicas[0]!);
      await Promise.all(replicas.slice(1).map(start));
    }, 180_000);

    afterAll(async () => {
      for (const r of replicas) await kill(r);
      const env = { BB_HOME: home };
      for (const slug of listBottles(env)) await destroy(slug, { backend, env }).catch(() => {});
      for (const c of await backend.list({ [HOME_LABEL]: homeLabel(env) }))
        await backend.destroy(c.id).catch(() => {});
      await new Promise((r) => lb?.close(r));
      await gitea?.close();
      await pg?.stop();
      if (process.env['BB_KEEP_HOME']) console.error(`kept ${home}, logs in ${logDir}`);
      else {
        rmSync(logDir, { recursive: true, force: true });
        await removeHome(home);
      }
    }, 120_000);

    it('leaves one bottle per targeted issue, each delivery accepted once, nothing done twice or lost', async () => {
      const db = await PostgresDatabase.open({ url: pg.url, max: 2 });
      const q = async <T extends Record<string, unknown>>(sql: string, args: unknown[] = []) =>
        (await db.query<T>('chaos check', sql, args)).rows;
      // Each kill's watch on its leases: done before they are judged, and before the pool closes.
      const watches: Array<Promise<void>> = [];
      try {
        // ---- the workload, spread over about 35 s, with a kill every 10 s
        const targeted: number[] = [];
        const badAgent: number[] = [];
        const plain: number[] = [];
        const actions: Array<() => void> = [];
        for (let i = 0; i < ISSUES; i++) {
          const kind = i < TARGETED ? 'targeted' : i < TARGETED + BAD_AGENT ? 'bad' : 'plain';
          actions.push(() => {
            const n = gitea.createIssue('alice', 'acme/widgets', {
              title: `Issue ${i}`,
              body: `Issue ${i}.`,
              ...(kind === 'plain'
                ? {}
                : {
                    labels: [kind === 'targeted' ? 'bot-bottle:worker' : 'bot-bottle:nosuch'],
                    assignees: ['bb-claude'],
                  }),
            });
            (kind === 'targeted' ? targeted : kind === 'bad' ? badAgent : plain).push(n);
          });
        }
        const sent = () => gitea.deliveries.filter((d) => !replayUuids.has(d.uuid)).length;
        const started = Date.now();
        const kills: Array<{
          victim: string;
          at: number;
          leases: string[];
          takenAt: Map<string, number>;
        }> = [];
        let nextKill = started + 10_000;
        let a = 0;
        while (sent() < ORIGINALS || a < actions.length) {
          if (a < actions.length) actions[a++]!();
          else {
            // Replies on the issues: mallory may not drive an agent; alice's land on issues with none.
            const all = [...targeted, ...badAgent, ...plain];
            const n = all[randomInt(all.length)]!;
            const who = plain.includes(n) ? 'alice' : 'mallory';
            gitea.comment(who, 'acme/widgets', n, `comment ${sent()}`);
          }
          // Replays of earlier deliveries, with new ids, as Gitea's "Replay" button does.
          if (replayUuids.size < REPLAYS && randomInt(100) < 7) {
            const earlier = gitea.deliveries.filter((d) => !replayUuids.has(d.uuid));
            const d = earlier[randomInt(earlier.length)];
            if (d) replayUuids.add(gitea.replay(d.uuid));
          }
          await sleep(35);
          if (Date.now() >= nextKill) {
            nextKill += 10_000;
            const victim = replicas[randomInt(replicas.length)]!;
            // The leases it holds on work left to do: a live bottle or events still open.
            const held = (
              await q<{ name: string }>(
                `SELECT l.name FROM work_leases l WHERE l.holder = $1 AND l.expires_at > now()
                   AND l.name LIKE 'issue:%' AND (
                     EXISTS (SELECT 1 FROM forge_state f
                             WHERE 'issue:' || f.owner || '/' || f.repo || '#' || f.issue_number = l.name)
                     OR EXISTS (SELECT 1 FROM event_inbox e WHERE e.state <> 'done' AND 'issue:' || e.issue = l.name))`,
                [victim.id],
              )
            ).map((r) => r.name);
            await kill(victim);
            const k = { victim: victim.id, at: Date.now(), leases: held, takenAt: new Map() };
            kills.push(k);
            // Watch its leases change hands; start it again once they must have.
            const watch = (async () => {
              while (k.takenAt.size < k.leases.length && Date.now() - k.at < 30_000) {
                const now = await q<{ name: string; holder: string }>(
                  'SELECT name, holder FROM work_leases WHERE name = ANY($1)',
                  [k.leases],
                );
                const holder = new Map(now.map((r) => [r.name, r.holder]));
                // Gone: another took it and gave it up again (the killed one cannot).
                for (const name of k.leases)
                  if (holder.get(name) !== k.victim && !k.takenAt.has(name))
                    k.takenAt.set(name, Date.now());
                await sleep(100);
              }
            })();
            watches.push(watch);
            setTimeout(() => void start(victim), TTL_MS + HEARTBEAT_MS + SCAN_SLACK_MS + 1000);
          }
        }
        // The random draw above may have made fewer than REPLAYS: the rest now.
        while (replayUuids.size < REPLAYS) {
          const earlier = gitea.deliveries.filter((d) => !replayUuids.has(d.uuid));
          replayUuids.add(gitea.replay(earlier[randomInt(earlier.length)]!.uuid));
        }
        await gitea.settle();
        while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
        // Every kill's replica back, then quiet: nothing open, every targeted bottle frozen with its PR.
        await until(
          'every orchestrator to be up',
          () => replicas.every((r) => r.proc) || undefined,
          60_000,
        );
        await until(
          'all events handled and the targeted bottles frozen',
          async () => {
            const open = await q('SELECT 1 FROM event_inbox WHERE state <> $1', ['done']);
            const frozen = await q<{ n: string }>(
              "SELECT count(*) AS n FROM forge_state WHERE status = 'frozen' AND pr_number IS NOT NULL",
            );
            return open.length === 0 && Number(frozen[0]!.n) === TARGETED ? true : undefined;
          },
          240_000,
        );
        const elapsed = Date.now() - started;

        // ---- one bottle per targeted issue, and nothing else
        const rows = await q<{ issue_number: number; slug: string; status: string }>(
          'SELECT issue_number, slug, status FROM forge_state ORDER BY issue_number',
        );
        expect(rows.map((r) => r.issue_number).sort((x, y) => x - y)).toEqual(
          [...targeted].sort((x, y) => x - y),
        );
        // ---- no comment made twice: the agents' and the bot's own
        for (const n of targeted) {
          const bodies = gitea.issue('acme/widgets', n).comments.map((c) => c.body);
          expect(
            bodies.filter((b) => b === 'Starting.'),
            `#${n}`,
          ).toHaveLength(1);
          expect(
            bodies.filter((b) => b === 'PR is up.'),
            `#${n}`,
          ).toHaveLength(1);
        }
        for (const n of badAgent) {
          const said = gitea
            .issue('acme/widgets', n)
            .comments.filter((c) => c.author === 'bb-claude');
          expect(said, `#${n}`).toHaveLength(1);
        }
        // ---- each delivery accepted once, whichever orchestrator it reached and however often
        const byKey = new Map<string, Answer[]>();
        for (const ans of answers)
          if (ans.body.key) byKey.set(ans.body.key, [...(byKey.get(ans.body.key) ?? []), ans]);
        // Never accepted twice. Accepted with no answer saying so: the orchestrator that wrote
        // it was killed before it answered, and the retry found it a duplicate; the ledger has it.
        const ledger = new Set(
          (await q<{ key: string }>('SELECT key FROM webhook_deliveries')).map((r) => r.key),
        );
        for (const [key, list] of byKey) {
          const yes = list.filter((x) => x.body.accepted).length;
          expect(yes, key).toBeLessThanOrEqual(1);
          if (yes === 0) expect(ledger.has(key), `${key} answered but never accepted`).toBe(true);
        }
        const dupes = answers.filter((x) => x.kind === 'duplicate');
        const replays = answers.filter((x) => x.kind === 'replay');
        expect(dupes.length).toBeGreaterThanOrEqual(DUPLICATES * 0.8);
        const answered = new Set(replays.map((r) => r.uuid));
        expect(
          replays.length,
          JSON.stringify(
            gitea.deliveries
              .filter((d) => replayUuids.has(d.uuid) && !answered.has(d.uuid))
              .map((d) => ({ uuid: d.uuid, status: d.status, error: d.error, at: d.deliveredAt })),
          ),
        ).toBe(REPLAYS);
        // A duplicate or a replay may arrive before its original: whichever came first counts.
        for (const d of answers) expect(d.status, `${d.kind} ${d.uuid}`).toBe(202);
        // ---- an issue's events: never two orchestrators at once, and in the forge's order
        const handled = logLines().filter((l) => l['msg'] === 'event handled');
        const retried = new Set(
          logLines()
            .filter((l) => String(l['msg']).startsWith('event failed'))
            .map((l) => String(l['event'])),
        );
        expect(handled.length).toBeGreaterThan(ORIGINALS / 2);
        const byIssue = new Map<string, typeof handled>();
        for (const h of handled) {
          const k = String(h['key']);
          byIssue.set(k, [...(byIssue.get(k) ?? []), h]);
        }
        const received = new Map(
          (
            await q<{ key: string; received_at: string }>(
              'SELECT key, received_at FROM event_inbox',
            )
          ).map((r) => [r.key, Date.parse(r.received_at)]),
        );
        for (const [issue, list] of byIssue) {
          const spans = list.map((h) => ({
            replica: h.replica,
            began: Date.parse(String(h['began'])),
            ended: Number(h['time']),
            occurredAt: Date.parse(String(h['occurredAt'])),
            accepted: received.get(String(h['event'])) ?? 0,
            event: String(h['event']),
          }));
          spans.sort((x, y) => x.began - y.began);
          for (let i = 1; i < spans.length; i++) {
            const [p, c] = [spans[i - 1]!, spans[i]!];
            // Two orchestrators never work on one issue at once.
            if (p.replica !== c.replica)
              expect(
                c.began,
                `${issue}: ${c.replica} began before ${p.replica} ended`,
              ).toBeGreaterThanOrEqual(p.ended - 5);
          }
          // In the forge's order: an event that happened earlier, and was accepted well before
          // a later one was begun on, was not handled after it. An event whose handling
          // failed and is retried is the exception, by design: it does not hold its issue's
          // later events back (a failing event must not wedge the issue).
          for (const later of spans)
            for (const earlier of spans)
              if (
                !retried.has(earlier.event) &&
                earlier.occurredAt < later.occurredAt &&
                earlier.accepted < later.began - 1000 &&
                earlier.began > later.began
              )
                throw new Error(
                  `${issue}: ${earlier.event} handled after ${later.event}\nearlier ${JSON.stringify(earlier)}\nlater ${JSON.stringify(later)}\n${logLines()
                    .filter((l) => l['key'] === issue || l['event'] === earlier.event)
                    .map((l) => JSON.stringify(l))
                    .join('\n')}`,
                );
        }
        // ---- nothing left: no orphan container (frozen bottles have none), no open event
        const live = new Set(rows.map((r) => r.slug));
        const containers = await backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) });
        expect(containers.filter((c) => !live.has(c.labels['bb.slug'] ?? ''))).toEqual([]);
        // ---- the killed ones' leases on work left were taken over within TTL + one heartbeat
        expect(kills.length).toBeGreaterThanOrEqual(3);
        // The last kill may be only seconds old when the work is done: its watch ends first.
        await Promise.all(watches);
        const delays: number[] = [];
        for (const k of kills)
          for (const name of k.leases) {
            const at = k.takenAt.get(name);
            expect(at, `${k.victim}'s ${name} was never taken over`).toBeDefined();
            delays.push(at! - k.at);
          }
        const worst = Math.max(0, ...delays);
        console.log(
          `[chaos] ${answers.length} deliveries answered (${dupes.length} duplicates, ${replays.length} replays), ${kills.length} kills, ${delays.length} leases taken over, worst ${worst} ms (TTL ${TTL_MS} + heartbeat ${HEARTBEAT_MS} ms), ${retried.size} events retried, quiet after ${Math.round(elapsed / 1000)} s`,
        );
        expect(worst).toBeLessThanOrEqual(TTL_MS + HEARTBEAT_MS + SCAN_SLACK_MS);
      } finally {
        await Promise.allSettled(watches);
        await db.close();
      }
    }, 600_000);
  },
);
