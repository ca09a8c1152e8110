// I3: secrets exist only in the process that uses them. The forge token and the
// model key are nowhere the engine shows (`docker inspect`, the engine's own
// container files), nowhere in the agent's container, and an upstream that
// echoes a key does not hand it to the agent. The sidecar is not the agent's user,
// so the agent cannot pull its sockets out from under it.

import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { HOME_LABEL, homeLabel } from '@bb/headless';
import { probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam, TOKEN } from './harness';

const docker = await probeDocker();
const MODEL_KEY = 'sk-redteam-model-key-93b1f0c2d7e4a6';

/** The agent and its gate, and `secret` in neither's configuration nor on either's disk. */
function expectTwoWithout(
  seen: Array<{ role: string; inspect: string; disk: string }>,
  secret: string,
): void {
  expect(seen.map((s) => s.role).sort()).toEqual(['agent', 'gate']);
  for (const s of seen) {
    expect(s.inspect).not.toContain(secret);
    expect(s.disk).not.toContain(secret);
  }
}

describe.skipIf(!docker.ok)('red team: secrets at rest', () => {
  const rt = new RedTeam();
  const engine = new Docker();
  let echo: Server;
  let echoPort = 0;
  beforeAll(async () => {
    await rt.start();
    // A model API that echoes every request header back in its body (some do, in errors).
    echo = createServer((req, res) => {
      res.setHeader('x-echo-auth', String(req.headers['x-api-key'] ?? ''));
      res.end(JSON.stringify({ path: req.url, headers: req.headers }));
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    echoPort = (echo.address() as { port: number }).port;
    rt.bottle('keyed', {
      image: process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
      credentials: [
        {
          route: '/anthropic',
          upstream: `http://127.0.0.1:${echoPort}/v1`,
          headers: { 'x-api-key': 'env:RT_MODEL_KEY' },
        },
      ],
    });
  });
  afterAll(async () => {
    echo?.close();
    await rt.stop();
  });

  /** Inspect a bottle's helper containers while its agent sleeps. */
  const whileRunning = async (bottles?: string[]) => {
    const seen: Array<{ role: string; inspect: string; disk: string; user: string }> = [];
    const launching = rt.launch([[{ do: 'sleep', ms: 4000 }]], {
      ...(bottles ? { bottles } : {}),
      env: { RT_MODEL_KEY: MODEL_KEY },
    });
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && seen.length < 2) {
      await new Promise((r) => setTimeout(r, 200));
      seen.length = 0;
      // This bench's containers only: other test files run theirs on the same engine.
      for (const c of await engine.listContainers({
        all: true,
        filters: { label: [`${HOME_LABEL}=${homeLabel(rt.env)}`] },
      })) {
        const i = await engine
          .getContainer(c.Id)
          .inspect()
          .catch(() => undefined);
        if (i?.State.Status !== 'running') continue;
        const disk = join('/var/lib/docker/containers', i.Id, 'config.v2.json');
        seen.push({
          role: i.Config.Labels['bb.role'] ?? '?',
          inspect: JSON.stringify(i),
          disk: existsSync(disk) ? readFileSync(disk, 'utf8') : '',
          user: i.Config.User,
        });
      }
    }
    await launching;
    return seen;
  };

  it('the forge token is not in the gate container configuration', async () => {
    const seen = await whileRunning();
    // Two containers: the agent and its gate (forge and supervise sidecars in one process).
    expectTwoWithout(seen, TOKEN);
  });

  it('the model key is not in the gate container configuration', async () => {
    const seen = await whileRunning(['keyed']);
    // The proxies join the same gate: still two containers.
    expectTwoWithout(seen, MODEL_KEY);
  });

  it('the gate (sidecars and proxies) does not run as the agent user', async () => {
    const seen = await whileRunning(['keyed']);
    const agent = seen.find((s) => s.role === 'agent')!.user;
    for (const s of seen.filter((x) => x.role !== 'agent')) expect(s.user).not.toBe(agent);
  });

  it('an upstream that echoes the key does not hand it to the agent', async () => {
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            cmd: `node -e "require('http').get('http://127.0.0.1:3129/anthropic/messages',r=>{let b='';r.on('data',d=>b+=d);r.on('end',()=>require('fs').writeFileSync('/workspace/resp.txt',JSON.stringify(r.headers)+b))})"`,
          },
        ],
      ],
      { bottles: ['keyed'], env: { RT_MODEL_KEY: MODEL_KEY } },
    );
    const got = (await rt.readWorkspace(run, 'resp.txt')) ?? '';
    expect(got).toContain('/v1/messages');
    expect(got).not.toContain(MODEL_KEY);
  });

  it('the agent cannot remove its sidecar socket and so cut its own audit short', async () => {
    const run = await rt.launch([
      [
        { do: 'sh', cmd: 'rm -f /run/bb/forge.sock; mv /run/bb /run/bb.gone', mayFail: true },
        { do: 'comment', body: 'still heard' },
      ],
    ]);
    expect(run.steps.at(-1)?.['do']).toBe('comment');
    expect(rt.gitea.issue('acme/widgets', rt.issue).comments.map((c) => c.body)).toContain(
      'still heard',
    );
  });

  it('nothing in the agent container holds the token or the key', async () => {
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            // Each secret split in two, so the search does not find this script itself.
            cmd: `a='${TOKEN.slice(0, 10)}'; b='${TOKEN.slice(10)}'; c='${MODEL_KEY.slice(0, 10)}'; d='${MODEL_KEY.slice(10)}'; grep -rl -e "$a$b" -e "$c$d" /home /workspace /run /tmp /opt /var /etc 2>/dev/null; cat /proc/self/environ | tr '\\0' '\\n' | grep -c -e "$a$b" -e "$c$d"`,
            mayFail: true,
          },
        ],
      ],
      { bottles: ['keyed'], env: { RT_MODEL_KEY: MODEL_KEY } },
    );
    expect(run.steps[0]!['stdout']).toBe('0\n');
  });
});
