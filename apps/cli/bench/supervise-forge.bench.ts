// supervise-forge: deciding on the forge thread against deciding on the host, through the
// running service (serve(), as `bb orchestrate serve` runs it) with the Gitea-compatible
// test server delivering signed webhooks and the script agent in a real Docker bottle.
// Each round the agent is refused a host by its egress proxy, asks for it with
// `$BB_SUPERVISE pipelock-block` and waits; once the request is on the issue it is decided,
// alternately:
//   ours      alice replies `/bb approve <id>` on the issue (webhook -> the thread reads
//             the command, checks she administers the repository, approves through the
//             service's desk: the proxies reload, the agent hears `approved`)
//   baseline  the operator approves at a desk already open on the host (the inbox's path:
//             `SuperviseDesk.approve` over the same BB_HOME, the same reload)
// timed from the decision to the moment the agent's retried request reaches the host it
// asked for (a listener on loopback sees it). Goal: p95 <= 2 s and <= 1.5x the host.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { acmeWorld, createGiteaTestServer } from '@bb/forge/testing';
import {
  bottleRemediator,
  DockerBackend,
  destroy,
  listBottles,
  supervisedBottles,
} from '@bb/headless';
import { makeTestHome, scriptAgent } from '@bb/headless/testing';
import { serve } from '@bb/service';
import { BbDatabase } from '@bb/state';
import { loadPolicy, SuperviseDesk, SuperviseStore } from '@bb/supervise';
import { benchRounds, reportBench } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`supervise-forge bench skipped: ${docker.reason}`);
  process.exit(0);
}
const ROUNDS = benchRounds(10, 2);
const TOKEN = 'bench-token-supervise-forge-01';
const SECRET = 'bench-supervise-forge-secret';
const ID = /request `(sr_[a-z0-9]{20})`/;

// One host per round, each a listener on loopback: the first request it sees is the
// agent's retry getting through (nothing reaches it before the approval).
const hosts: Array<{ server: Server; port: number; reached?: number }> = [];
for (let i = 0; i < 2 * ROUNDS; i++) {
  const h: (typeof hosts)[number] = { server: createServer(), port: 0 };
  h.server.on('request', (_req, res) => {
    h.reached ??= performance.timeOrigin + performance.now();
    res.end('ok');
  });
  await new Promise<void>((r) => h.server.listen(0, '127.0.0.1', r));
  h.port = (h.server.address() as { port: number }).port;
  hosts.push(h);
}
const entry = (i: number) => `127.0.0.1:${hosts[i]!.port}`;

/** A node one-liner through the bottle's egress proxy to round `i`'s host: its status, or retry until 200. */
const through = (i: number, retry: boolean) =>
  `node -e "const h=require('http');const go=()=>h.get({host:'127.0.0.1',port:3128,path:'http://${entry(i)}/x',headers:{host:'${entry(i)}'}},r=>{r.resume();if(r.statusCode===200)process.exit(0);if(!${retry})process.exit(r.statusCode===403?0:1);setTimeout(go,10)}).on('error',()=>${retry}?setTimeout(go,10):process.exit(1));go()"`;
const steps = hosts.flatMap((_, i) => [
  // Refused first: the host is not on its allowlist.
  { do: 'sh', cmd: through(i, false) },
  {
    do: 'sh',
    cmd: `printf '${JSON.stringify({ allow: ['registry.npmjs.org', ...hosts.slice(0, i + 1).map((_, j) => entry(j))] })}\\n' > /tmp/allow.json`,
  },
  {
    do: 'sh',
    cmd: `$BB_SUPERVISE pipelock-block --file /tmp/allow.json --why 'round ${i} of the bench needs its host' --wait 120`,
  },
  { do: 'sh', cmd: through(i, true) },
]);
const home = makeTestHome('bb-bench-supervise-forge-', {
  agents: {
    asker: scriptAgent([
      { steps: [...steps, { do: 'done', status: 'success', summary: 'All rounds.' }] },
    ]),
  },
  bottles: { default: { image: BASE_IMAGE, egress: { allow: ['registry.npmjs.org'] } } },
});
mkdirSync(join(home, 'config'), { recursive: true });
// The operator's ceiling lets every round's host in, so a reply on the issue may approve it.
writeFileSync(
  join(home, 'config', 'supervise.json'),
  JSON.stringify({ egressCeiling: hosts.map((_, i) => entry(i)) }),
);
const gitea = await createGiteaTestServer({
  world: acmeWorld(TOKEN, { aliceToken: 'alice-token-bench-0001', admins: ['bb-claude', 'alice'] }),
});
const backend = new DockerBackend();
const orch = await serve({
  env: {
    BB_HOME: home,
    BB_BASE_IMAGE: BASE_IMAGE,
    BB_PORT: '0',
    FORGE_GITEA_API: gitea.apiUrl,
    FORGE_TOKEN: TOKEN,
    FORGE_WEBHOOK_SECRET: SECRET,
    BB_SWEEP_INTERVAL: '0',
  },
  backend,
  logStream: { write: () => true } as unknown as NodeJS.WritableStream,
});
gitea.addHook({ url: `${orch.url}/webhooks/gitea`, secret: SECRET });

// The operator's desk on the host, already open (as the inbox is) over the same BB_HOME.
const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
const desk = new SuperviseDesk({
  store: new SuperviseStore(db),
  bottles: supervisedBottles({ BB_HOME: home }),
  policy: loadPolicy(home),
  remediator: bottleRemediator({ backend, env: { BB_HOME: home } }),
});

const until = async <T>(what: string, fn: () => T | undefined, ms = 120_000): Promise<T> => {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`supervise-forge bench: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
};
const now = () => performance.timeOrigin + performance.now();
const p95 = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(xs.length * 0.95) - 1)]!;

const forge: number[] = [];
const host: number[] = [];
let failed: unknown;
try {
  const n = gitea.createIssue('alice', 'acme/widgets', {
    title: 'Bench the thread',
    body: 'Each round needs a host.',
    labels: ['bot-bottle:asker'],
    assignees: ['bb-claude'],
  });
  const seen = new Set<string>();
  for (let i = 0; i < hosts.length; i++) {
    // The request of this round, once it is on the issue (the thread posted it).
    const id = await until(`round ${i}'s request on the issue`, () => {
      for (const c of gitea.issue('acme/widgets', n).comments) {
        const m = ID.exec(c.body);
        if (m && !seen.has(m[1]!)) return m[1]!;
      }
      return undefined;
    });
    seen.add(id);
    const t0 = now();
    if (i % 2 === 0) gitea.comment('alice', 'acme/widgets', n, `/bb approve ${id}`);
    else {
      const r = await desk.show(id);
      await desk.approve(id, {
        by: 'bench',
        via: 'tui',
        expect: { baseHash: r.baseHash, candidateHash: r.candidateHash },
      });
    }
    const reached = await until(`round ${i}'s host to be reached`, () => hosts[i]!.reached);
    (i % 2 === 0 ? forge : host).push(reached - t0);
  }
} catch (err) {
  failed = err;
} finally {
  db.close();
  await orch.close();
  for (const slug of listBottles({ BB_HOME: home }))
    await destroy(slug, { backend, env: { BB_HOME: home } }).catch(() => {});
  await gitea.close();
  for (const h of hosts) h.server.close();
  rmSync(home, { recursive: true, force: true });
}
if (failed) throw failed;

reportBench({
  name: 'supervise-forge',
  metric:
    "forge reply /bb approve -> the agent's refused request gets through, p95 ms, vs approving at a desk open on the host",
  ours: p95(forge),
  baseline: p95(host),
  goal: 1.5,
  higherIsBetter: false,
  target: 'p95 <= 2000 ms and <= 1.5x the host',
  pass: p95(forge) <= 2000 && p95(forge) <= 1.5 * p95(host),
  extra: {
    'forge median ms': Math.round([...forge].sort((a, b) => a - b)[Math.floor(forge.length / 2)]!),
    'host median ms': Math.round([...host].sort((a, b) => a - b)[Math.floor(host.length / 2)]!),
    rounds: ROUNDS,
  },
});
