// I7: egress goes only where the bottle's manifest allows. A name on the allowlist
// that resolves to loopback (or any private, link-local or metadata address) is
// refused unless the manifest names that address itself; a credential route
// cannot be left by path tricks; hop-by-hop headers stop at the proxy.

import { createServer, type Server } from 'node:http';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();
const KEY = 'sk-redteam-egress-key-0c4f2b7a91';

/** A node one-liner the agent runs: a raw HTTP request through a bottle port, response to a file. */
const request = (port: number, head: string, out: string) =>
  `node -e "const s=require('net').connect(${port},'127.0.0.1',()=>s.write(process.argv[1].replace(/~/g,'\\r\\n')));let b='';s.on('data',d=>b+=d);s.on('close',()=>require('fs').appendFileSync('/workspace/${out}',b+'\\n=====\\n'));s.on('error',e=>require('fs').appendFileSync('/workspace/${out}','error '+e.message+'\\n=====\\n'))" "${head}"`;

describe.skipIf(!docker.ok)('red team: egress', () => {
  const rt = new RedTeam();
  let upstream: Server;
  let port = 0;
  const seen: Array<{ url: string; headers: Record<string, unknown> }> = [];
  beforeAll(async () => {
    await rt.start();
    upstream = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      res.end('upstream answered\n');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    port = (upstream.address() as { port: number }).port;
    rt.bottle('inward', {
      image: process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
      // Names only: each resolves to loopback on this host.
      egress: { allow: [`localhost:${rt.listener.port}`, `ip6-localhost:${rt.listener.port}`] },
    });
    // The upstream listed by its address: the one way a loopback destination is allowed.
    rt.bottle('listed', {
      image: process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
      egress: { allow: [`127.0.0.1:${port}`] },
    });
    rt.bottle('routed', {
      image: process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
      credentials: [
        {
          route: '/anthropic',
          upstream: `http://127.0.0.1:${port}/api/anthropic`,
          headers: { 'x-api-key': 'env:RT_EGRESS_KEY' },
        },
      ],
    });
  });
  afterAll(async () => {
    upstream?.close();
    await rt.stop();
  });

  it('an allowlisted name that resolves to loopback is refused (CONNECT and plain HTTP)', async () => {
    const heard = rt.listener.heard.length;
    const p = rt.listener.port;
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            cmd: request(
              3128,
              `CONNECT localhost:${p} HTTP/1.1~Host: localhost:${p}~~hello`,
              'out.txt',
            ),
          },
          {
            do: 'sh',
            cmd: request(
              3128,
              `GET http://localhost:${p}/x HTTP/1.1~Host: localhost:${p}~Connection: close~~`,
              'out.txt',
            ),
          },
          {
            do: 'sh',
            cmd: request(
              3128,
              `CONNECT ip6-localhost:${p} HTTP/1.1~Host: ip6-localhost:${p}~~hello`,
              'out.txt',
            ),
          },
          // The bottle's ports are bb-relay's (the bridge's C relay), one per port.
          { do: 'sh', cmd: 'cat /proc/[0-9]*/comm | grep -c bb-relay > /workspace/relays.txt' },
        ],
      ],
      { bottles: ['inward'] },
    );
    const out = (await rt.readWorkspace(run, 'out.txt')) ?? '';
    expect(out.split('=====').filter((x) => x.includes(' 403 ')).length).toBe(3);
    expect((await rt.readWorkspace(run, 'relays.txt'))?.trim()).toBe('2');
    expect(rt.listener.heard.slice(heard)).toBe('');
  });

  it('an allowed tunnel carries the bytes sent behind its CONNECT and is logged once with them', async () => {
    seen.length = 0;
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            // The request inside the tunnel sent at once behind the CONNECT head.
            cmd: request(
              3128,
              `CONNECT 127.0.0.1:${port} HTTP/1.1~Host: 127.0.0.1:${port}~~GET /tunnelled HTTP/1.1~Host: x~Connection: close~~`,
              'out.txt',
            ),
          },
        ],
      ],
      { bottles: ['listed'] },
    );
    const out = (await rt.readWorkspace(run, 'out.txt')) ?? '';
    expect(out).toMatch(/^HTTP\/1\.1 200 Connection Established\r\n\r\nHTTP\/1\.1 200 OK/);
    expect(out).toContain('upstream answered');
    expect(seen.map((x) => x.url)).toEqual(['/tunnelled']);
    const { record } = await rt.record(run);
    const egress = record.egress as { allowed: Array<Record<string, number | string>> } | undefined;
    const dest = egress?.allowed.find((d) => d['host'] === '127.0.0.1');
    expect(dest).toMatchObject({ port, connections: 1 });
    expect(dest!['bytesUp']).toBeGreaterThan(40);
    expect(dest!['bytesDown']).toBeGreaterThan(40);
  });

  it('a credential route cannot be left with dot segments, encoded or not', async () => {
    seen.length = 0;
    const tricks = [
      '/anthropic/v1/ok',
      '/anthropic/../secret',
      '/anthropic/%2e%2e/secret',
      '/anthropic/%2E%2E%2Fsecret',
      '/anthropic/..%2fsecret',
      '/anthropic/.%2e/secret',
      '/anthropic/x/../../secret',
      '/anthropic\\\\..\\\\secret',
      '/anthropic//127.0.0.1/secret',
    ];
    await rt.launch(
      [
        tricks.map((t) => ({
          do: 'sh',
          cmd: request(3129, `GET ${t} HTTP/1.1~Host: x~Connection: close~~`, 'out.txt'),
        })),
      ],
      { bottles: ['routed'], env: { RT_EGRESS_KEY: KEY } },
    );
    // The honest request went through; no trick left the route's base path.
    expect(seen.map((s) => s.url)).toContain('/api/anthropic/v1/ok');
    for (const s of seen) {
      const normalised = new URL(s.url, 'http://upstream').pathname;
      expect(normalised.startsWith('/api/anthropic/') || normalised === '/api/anthropic').toBe(
        true,
      );
    }
  });

  it('hop-by-hop headers and the headers they name are not forwarded upstream', async () => {
    seen.length = 0;
    await rt.launch(
      [
        [
          {
            do: 'sh',
            cmd: request(
              3129,
              'GET /anthropic/v1/models HTTP/1.1~Host: x~Connection: close, x-smuggle~X-Smuggle: 1~TE: trailers~Upgrade: websocket~Keep-Alive: timeout=5~Proxy-Authorization: Basic eDp5~~',
              'out.txt',
            ),
          },
        ],
      ],
      { bottles: ['routed'], env: { RT_EGRESS_KEY: KEY } },
    );
    expect(seen).toHaveLength(1);
    const h = seen[0]!.headers;
    for (const name of ['x-smuggle', 'te', 'upgrade', 'keep-alive', 'proxy-authorization'])
      expect(h[name], name).toBeUndefined();
    expect(h['x-api-key']).toBe(KEY);
  });
});
