import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGiteaTestServer } from '@bb/forge/testing';
import { BASE_IMAGE } from '@bb/tooling/docker';
import { destroy, launch, resume } from '../src/bottles';
import { DockerBackend } from '../src/docker-backend';
import { bottlePaths } from '../src/layout';

const TOKEN = 'tok-timing-0123456789';
const server = await createGiteaTestServer({
  world: {
    users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
    orgs: [{ name: 'acme', members: ['alice'] }],
    repos: [{ owner: 'acme', name: 'widgets', collaborators: ['bot'], admins: ['bot'] }],
    issues: [{ repo: 'acme/widgets', title: 'x', author: 'alice' }],
  },
});
const home = mkdtempSync(join(tmpdir(), 'bb-timing-'));
mkdirSync(join(home, 'config', 'agents'), { recursive: true });
mkdirSync(join(home, 'config', 'bottles'), { recursive: true });
writeFileSync(join(home, 'config', 'agents', 'a.json'), JSON.stringify({ provider: 'script', git: { name: 'B', email: 'b@example.test' }, script: { turns: [
  { steps: [{ do: 'read_issue' }, { do: 'write', path: 'x.txt', content: 'x' }, { do: 'commit', message: 'x' }, { do: 'open_pr', title: 'x', body: '' }, { do: 'done', status: 'success', summary: 'ok' }] },
  { steps: [{ do: 'read_issue' }] }] } }));
writeFileSync(join(home, 'config', 'bottles', 'default.json'), JSON.stringify({ image: BASE_IMAGE }));
const env = { BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE, BB_SUPERVISE: process.env['BB_SUPERVISE'] ?? 'on' };
const real = new DockerBackend();
const backend = new Proxy(real, {
  get(target, prop, recv) {
    const v = Reflect.get(target, prop, recv);
    if (typeof v !== 'function') return v;
    return (...args: unknown[]) => {
      const t = Date.now() - t0;
      const r = v.apply(target, args);
      const name = String(prop);
      const what = name === 'create' ? (args[0] as { name: string }).name : '';
      if (r && typeof r.then === 'function')
        r.then(() => console.log(`${String(t).padStart(5)}..${String(Date.now() - t0).padStart(5)} ${name} ${what}`), () => {});
      return r;
    };
  },
}) as DockerBackend;
const forge = { apiUrl: server.apiUrl, token: TOKEN, owner: 'acme', repo: 'widgets', issue: 1, cloneUrl: server.cloneUrl('acme/widgets') };
let t0 = Date.now();
const tl = t0;
const ops0 = (slug: string) => readFileSync(join(bottlePaths(slug, env).state, 'ops.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { time: string });
const log = (m: string) => console.log(`${String(Date.now() - t0).padStart(5)} ${m}`);
const warm = await launch({ agent: 'a', prompt: 'go', forge, backend, env, onProgress: () => {} });
await destroy(warm.slug, { backend, env });
console.log('---- second launch');
t0 = Date.now();
const tl2 = t0;
const first = await launch({ agent: 'a', prompt: 'go', forge, backend, env, onProgress: log });
console.log(`launch: first call after ${Date.parse(ops0(first.slug)[0]!.time) - tl2} ms`);
const ops = () => readFileSync(join(bottlePaths(first.slug, env).state, 'ops.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { time: string; method?: string; op?: string });
for (const round of [1, 2]) {
  const before = ops().length;
  t0 = Date.now();
  const pr = 2;
  await resume({ slug: first.slug, prompt: 'again', forgeToken: TOKEN, backend, env, pr, onProgress: log });
  const o = ops()[before]!;
  console.log(`round ${round}: first call after ${Date.parse(o.time) - t0} ms`);
  const logs = join(bottlePaths(first.slug, env).logs);
  for (const f of readdirSync(logs).sort().slice(-2)) console.log(f, readFileSync(join(logs, f), 'utf8').slice(0, 1500));
}
await destroy(first.slug, { backend, env });
await server.close();
