// supervise: how long the operator's side and the remediation take.
//   visible:  proposal made (the agent's call) -> listed by the desk `bb supervise list --json` uses;
//             floor: the request file written and read back by a directory scan.
//   unblock:  approval -> the refused request succeeds (the agent hears `approved`, retries),
//             for an allowlist and a routes change; baseline: the same reload done by hand
//             (file written, SIGHUP, reload confirmed, request retried).
//   in flight: requests through the credential proxy while it reloads must all complete.
// The proxies are the real bb-egress bundle in its own process, reloaded by the same code a
// bottle's are (`reloadBottleProxies`, SIGHUP); only the Docker engine's signal call is a
// process.kill here. Goal: p95 <= 1 s for both, and no request dropped by a reload.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { BbDatabase } from '@bb/state';
import {
  defaultPolicy,
  SuperviseClient,
  SuperviseDesk,
  SuperviseSidecar,
  SuperviseStore,
  serveSupervise,
} from '@bb/supervise';
import { benchRounds, reportBench, waitForPath } from '@bb/tooling/bench';
import { type BottleMeta, bottlePaths, writeMeta } from '../src/bottle/layout';
import { secretsDir } from '../src/bottle/secrets';
import { reloadBottleProxies, supervisedBottles } from '../src/bottle/supervise-remedy';
import type { Backend } from '../src/engine/backend';

const ROUNDS = benchRounds(25, 3);
const SLUG = 'bench-sup01';
const KEY = 'sk-bench-supervise-key-0001';
const home = mkdtempSync(join(tmpdir(), 'bb-bench-supervise-'));
const env = { BB_HOME: home, BB_RUN_DIR: join(home, 'run'), BENCH_KEY: KEY };
const p = bottlePaths(SLUG, env);
for (const d of [p.proxy, p.state, p.sock, p.currentConfig, p.supervise])
  mkdirSync(d, { recursive: true });
const meta: BottleMeta = {
  slug: SLUG,
  agent: 'bench',
  bottles: ['bench'],
  backend: 'bench',
  image: 'bb-base:latest',
  status: 'running',
  sessionId: 's',
  cwd: '/workspace',
  branch: 'b',
  forge: null,
  turns: [],
  current: { turn: 1, prompt: 'x', startedAt: new Date().toISOString() },
  createdAt: new Date().toISOString(),
};
writeMeta(meta, env);

// Upstreams on loopback: one quick, one slow (for requests in flight during a reload).
const upstream = createServer((req, res) => {
  if (req.url?.startsWith('/slow')) setTimeout(() => res.end('slow ok'), 150);
  else res.end(`ok ${req.headers['x-api-key'] === KEY ? 'keyed' : 'plain'}`);
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const port = (upstream.address() as { port: number }).port;
const base = `http://127.0.0.1:${port}`;

const allow0 = `${JSON.stringify({ allow: ['registry.npmjs.org'] }, null, 2)}\n`;
const allow1 = `${JSON.stringify({ allow: ['registry.npmjs.org', `127.0.0.1:${port}`] }, null, 2)}\n`;
const routes0 = `${JSON.stringify({ routes: [{ prefix: '/slow', upstream: `${base}/slow`, headers: {} }] }, null, 2)}\n`;
const routes1 = `${JSON.stringify(
  {
    routes: [
      { prefix: '/slow', upstream: `${base}/slow`, headers: {} },
      { prefix: '/svc', upstream: `${base}/svc`, headers: { 'x-api-key': 'env:BENCH_KEY' } },
    ],
  },
  null,
  2,
)}\n`;
for (const [dir, f, t] of [
  [p.proxy, 'rules.json', allow0],
  [p.proxy, 'routes.json', routes0],
  [p.currentConfig, 'allowlist.json', allow0],
  [p.currentConfig, 'routes.json', routes0],
  [p.currentConfig, 'Dockerfile', 'FROM bb-base:latest\n'],
] as const)
  writeFileSync(join(dir, f), t);

// The real proxies, in a bottle's gate process.
const require = createRequire(import.meta.url);
const bundle = join(
  dirname(require.resolve('@bb/headless/package.json')),
  'dist',
  'bundle',
  'bb-gate.mjs',
);
const keys = secretsDir(SLUG, 'gate', env);
mkdirSync(keys, { recursive: true });
writeFileSync(join(keys, 'keys.json'), '{}');
// Whatever happens, the proxy process goes with this one (a failed round must not hang the run).
process.on('exit', () => proxy?.kill('SIGKILL'));
process.on('unhandledRejection', (err) => {
  console.error(err);
  process.exit(1);
});
const proxy: ChildProcess = spawn(process.execPath, [bundle], {
  stdio: ['ignore', 'ignore', 'inherit'],
  env: {
    ...process.env,
    BB_SLUG: SLUG,
    BB_EGRESS_RULES: join(p.proxy, 'rules.json'),
    BB_CRED_ROUTES: join(p.proxy, 'routes.json'),
    BB_CRED_SECRETS_FILE: join(keys, 'keys.json'),
    BB_EGRESS_SOCKET: join(p.sock, 'egress.sock'),
    BB_CRED_SOCKET: join(p.sock, 'cred.sock'),
    BB_EGRESS_LOG: join(p.state, 'egress.jsonl'),
    BB_PROXY_STATUS: join(p.state, 'proxy-status.json'),
  },
});
await waitForPath(join(p.sock, 'cred.sock'));
await waitForPath(join(p.sock, 'egress.sock'));

// A backend that knows one gate and signals it as the engine would.
const backend = {
  name: 'bench',
  isolates: false,
  mapsMounts: false,
  list: async () => [
    { id: 'gate', labels: { 'bb.role': 'gate', 'bb.slug': SLUG }, state: 'running' },
  ],
  signal: async (_id: string, sig: NodeJS.Signals) => void proxy.kill(sig),
} as unknown as Backend;

const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
const desk = new SuperviseDesk({
  store: new SuperviseStore(db),
  bottles: supervisedBottles(env),
  policy: { ...defaultPolicy(), credentialHosts: { BENCH_KEY: ['127.0.0.1'] } },
  remediator: {
    reloadProxies: (slug, kind, text, scope) =>
      reloadBottleProxies(slug, kind, text, scope, { backend, env }),
  },
});
const sidecar = new SuperviseSidecar({
  slug: SLUG,
  dir: p.supervise,
  currentConfig: p.currentConfig,
  allowedBases: ['bb-base:latest'],
  maxRequests: 10_000,
  coolDownAfter: 10_000,
});
const server = await serveSupervise(sidecar, join(p.sock, 'supervise.sock'));
const client = new SuperviseClient({ socketPath: join(p.sock, 'supervise.sock') });

/** One request as the agent makes it: egress (absolute-form) or credential route. */
const call = (kind: 'allowlist' | 'routes', path = '/svc/items') =>
  new Promise<number>((resolve) => {
    const r = request(
      kind === 'allowlist'
        ? {
            socketPath: join(p.sock, 'egress.sock'),
            path: `${base}/x`,
            headers: { host: `127.0.0.1:${port}` },
          }
        : { socketPath: join(p.sock, 'cred.sock'), path },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    r.on('error', () => resolve(-1));
    r.end();
  });

/** Back to the state where the request is refused (by hand, untimed). */
const reset = async (kind: 'allowlist' | 'routes') => {
  await reloadBottleProxies(SLUG, kind, kind === 'allowlist' ? allow0 : routes0, 'turn', {
    backend,
    env,
  });
  if ((await call(kind)) === 200) throw new Error(`reset failed for ${kind}`);
};

// Requests in flight through the credential proxy the whole time: none may be dropped.
let inflight = true;
let sent = 0;
let dropped = 0;
const load = Promise.all(
  Array.from({ length: 8 }, async () => {
    while (inflight) {
      sent++;
      if ((await call('routes', '/slow/x')) !== 200) dropped++;
    }
  }),
);

const p95 = (xs: number[]) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(xs.length * 0.95) - 1)]!;
const visible: number[] = [];
const ours: Record<'allowlist' | 'routes', number[]> = { allowlist: [], routes: [] };
const byHand: Record<'allowlist' | 'routes', number[]> = { allowlist: [], routes: [] };
let reloads = 0;

for (let i = 0; i < ROUNDS; i++)
  for (const kind of ['allowlist', 'routes'] as const) {
    // By hand: the operator writes the file and reloads; the request is retried.
    await reset(kind);
    let t = performance.now();
    await reloadBottleProxies(SLUG, kind, kind === 'allowlist' ? allow1 : routes1, 'turn', {
      backend,
      env,
    });
    if ((await call(kind)) !== 200) throw new Error(`by hand: ${kind} still refused`);
    byHand[kind].push(performance.now() - t);
    reloads += 2;

    // Through supervise: the agent proposes and waits; the operator sees it and approves.
    await reset(kind);
    const made = performance.now();
    const answer = client.propose(
      kind === 'allowlist' ? 'pipelock-block' : 'cred-proxy-block',
      kind === 'allowlist'
        ? { allowlist: allow1, justification: 'the bench needs the service' }
        : { routes: routes1, justification: 'the bench needs the service' },
      30_000,
    );
    let id: string | undefined;
    while (!id) {
      id = (await desk.list({ status: 'pending' }))[0]?.id;
      if (!id) await new Promise((r) => setTimeout(r, 2));
    }
    visible.push(performance.now() - made);
    t = performance.now();
    await desk.approve(id, { by: 'bench', via: 'cli', override: true });
    const a = await answer;
    if (a.status !== 'approved') throw new Error(`not approved: ${JSON.stringify(a)}`);
    if ((await call(kind)) !== 200) throw new Error(`through supervise: ${kind} still refused`);
    ours[kind].push(performance.now() - t);
    reloads += 2;
  }
inflight = false;
await load;

// The floor of "visible": a request file written and found again by a directory scan.
const floor: number[] = [];
const scratch = join(home, 'floor');
mkdirSync(scratch);
for (let i = 0; i < ROUNDS; i++) {
  const t = performance.now();
  writeFileSync(join(scratch, `r${i}.json`), readFileSync(join(p.currentConfig, 'routes.json')));
  for (const f of readdirSync(scratch)) JSON.parse(readFileSync(join(scratch, f), 'utf8'));
  floor.push(performance.now() - t);
}

const allOurs = [...ours.allowlist, ...ours.routes];
const allHand = [...byHand.allowlist, ...byHand.routes];
const extra = {
  'allowlist p95 ms': p95(ours.allowlist),
  'routes p95 ms': p95(ours.routes),
  'by hand allowlist p95 ms': p95(byHand.allowlist),
  'by hand routes p95 ms': p95(byHand.routes),
  'requests in flight': sent,
  'dropped by a reload': dropped,
  reloads,
  rounds: ROUNDS,
};
reportBench({
  name: 'supervise',
  metric:
    'approval -> refused request succeeds, p95 ms (allowlist and routes) vs the same reload by hand',
  ours: p95(allOurs),
  baseline: p95(allHand),
  goal: 1000,
  higherIsBetter: false,
  target: 'p95 <= 1000 ms, 0 dropped',
  pass: p95(allOurs) <= 1000 && dropped === 0,
  extra,
});
reportBench({
  name: 'supervise-visible',
  metric: 'proposal -> listed for the operator, p95 ms vs writing and scanning the request file',
  ours: p95(visible),
  baseline: p95(floor),
  goal: 1000,
  higherIsBetter: false,
  target: 'p95 <= 1000 ms',
  pass: p95(visible) <= 1000,
});

await client.close();
await server.close();
proxy.kill('SIGTERM');
upstream.close();
db.close();
rmSync(home, { recursive: true, force: true });
