// A real bottle with no network reaches an allowed host and the model API only
// through the in-bottle bridge and the proxies; the key never enters the bottle.
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProxies } from '../src/proxies';

const docker = await probeDocker();
const KEY = 'sk-model-key-never-in-the-bottle-42';
const bundles = join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle');

describe.skipIf(!docker.ok)('real Docker: egress from a bottle through the bridge', () => {
  let upstream: Server;
  let port: number;
  const seen: IncomingHttpHeaders[] = [];
  let dir: string;
  let proxies: Awaited<ReturnType<typeof startProxies>>;

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      seen.push(req.headers);
      res.writeHead(200).end(`upstream saw ${req.url}`);
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    port = (upstream.address() as AddressInfo).port;
    dir = mkdtempSync(join(tmpdir(), 'bb-bottle-egress-'));
    chmodSync(dir, 0o755);
    mkdirSync(join(dir, 'sock'));
    chmodSync(join(dir, 'sock'), 0o777);
    cpSync(bundles, join(dir, 'bin'), { recursive: true });
    const { writeFileSync } = await import('node:fs');
    writeFileSync(
      join(dir, 'rules.json'),
      JSON.stringify({ allow: [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`] }),
    );
    writeFileSync(
      join(dir, 'routes.json'),
      JSON.stringify({
        routes: [
          {
            prefix: '/model',
            upstream: `http://127.0.0.1:${port}/v1`,
            headers: { 'x-api-key': 'env:MODEL_KEY' },
          },
        ],
      }),
    );
    proxies = await startProxies({
      rulesFile: join(dir, 'rules.json'),
      routesFile: join(dir, 'routes.json'),
      egressSocket: join(dir, 'sock', 'egress.sock'),
      credSocket: join(dir, 'sock', 'cred.sock'),
      logFile: join(dir, 'egress.jsonl'),
      env: { MODEL_KEY: KEY },
      onMessage: () => {},
    });
  });
  afterAll(async () => {
    await proxies?.close();
    upstream?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reaches the allowed host and the credential route, is refused elsewhere, and never holds the key', async () => {
    const script = `
      node /opt/bb/bb-bridge.mjs 3128=/run/bb/egress.sock 3129=/run/bb/cred.sock &
      sleep 0.5
      node -e '
        const http = require("node:http");
        const get = (opts) => new Promise((res) => http.get(opts, (r) => { let b=""; r.on("data", d => b += d); r.on("end", () => res(r.statusCode + " " + b)); }).on("error", e => res("ERR " + e.message)));
        (async () => {
          console.log("allowed:", await get({ host: "127.0.0.1", port: 3128, path: "http://localhost:${port}/pkg", headers: { host: "localhost:${port}" } }));
          console.log("denied:", await get({ host: "127.0.0.1", port: 3128, path: "http://example.invalid/", headers: { host: "example.invalid" } }));
          console.log("model:", await get({ host: "127.0.0.1", port: 3129, path: "/model/messages", headers: { "x-api-key": "agent-guess" } }));
        })();
      '
      echo "relays: $(cat /proc/[0-9]*/comm | grep -c bb-relay)"
    `;
    const client = new Docker();
    const c = await client.createContainer({
      Image: BASE_IMAGE,
      Cmd: ['sh', '-c', script],
      User: '1000:1000',
      Env: ['HTTPS_PROXY=http://127.0.0.1:3128', 'ANTHROPIC_BASE_URL=http://127.0.0.1:3129/model'],
      Labels: { 'bb.test': 'bottle-egress' },
      HostConfig: {
        NetworkMode: 'none',
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        ReadonlyRootfs: true,
        Binds: [`${join(dir, 'bin')}:/opt/bb:ro`, `${join(dir, 'sock')}:/run/bb`],
      },
    });
    try {
      await c.start();
      await c.wait();
      const logs = (await c.logs({ stdout: true, stderr: true })).toString('utf8');
      expect(logs).toContain(`allowed: 200 upstream saw /pkg`);
      expect(logs).toMatch(/denied: 403 .*egress to example.invalid:80 denied/);
      expect(logs).toContain('model: 200 upstream saw /v1/messages');
      // The ports were bb-relay's (one per port), and the bridge never served them itself.
      expect(logs).toContain('relays: 2');
      expect(logs).not.toContain('served by the bridge itself');
      expect(seen.at(-1)!['x-api-key']).toBe(KEY);
      const inspect = JSON.stringify(await c.inspect());
      expect(inspect).not.toContain(KEY);
      expect(logs).not.toContain(KEY);
      const egressLog = readFileSync(join(dir, 'egress.jsonl'), 'utf8');
      expect(egressLog).not.toContain(KEY);
      expect(egressLog).toContain('"decision":"denied"');
    } finally {
      await c.remove({ force: true });
    }
  });
});
