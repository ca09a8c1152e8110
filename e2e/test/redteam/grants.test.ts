import type { Policy } from '@bb/supervise';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approveForTurn,
  askForHost,
  askForSvcRoute,
  askSupervise,
  busyOperator,
  editConfig,
  guardedBench,
  RedTeam,
  rawHttp,
  type Step,
  type startUpstream,
} from './harness';

const docker = await probeDocker();
const KEY = 'sk-grant-scope-key-7e21c9d04b';
const NEW_KEY = 'sk-grant-scope-new-key-93af1b';

const http = rawHttp;
const _edit = editConfig;
const _ask = askSupervise;

describe.skipIf(!docker.ok)('red team: a grant ends with its scope (I9)', () => {
  const rt = new RedTeam();
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let port = 0;
  let seen: Array<{ url: string; key: unknown }> = [];
  let policy: Policy;

  beforeAll(async () => {
    await rt.start();
    ({ upstream, policy } = await guardedBench(rt, '/model'));
    port = upstream.port;
    seen = upstream.seen;
  });
  afterAll(async () => {
    upstream?.close();
    await rt.stop();
  });

  /** The busy operator: approves the next two requests for this turn, whatever they are. */
  const operator = async () => {
    const approved: string[] = [];
    await busyOperator(
      () => rt.desk(policy, { SUP_NEW_KEY: NEW_KEY }),
      async (d, r) => {
        await approveForTurn(d, r);
        approved.push(r.kind);
      },
      2,
    ).done;
    return approved;
  };

  const target = () => `127.0.0.1:${port}`;
  const firstTurn = (): Step[] => [
    ...askForHost(target(), 'the test service on this port serves the fixtures I need', 'a1.json'),
    {
      do: 'sh',
      cmd: http(
        3128,
        `GET http://${target()}/t1 HTTP/1.1~Host: ${target()}~Connection: close~~`,
        't1-host.txt',
      ),
    },
    ...askForSvcRoute(port, 'the svc API lists the items I must fix', 'a2.json'),
    {
      do: 'sh',
      cmd: http(3129, 'GET /svc/t1 HTTP/1.1~Host: x~Connection: close~~', 't1-route.txt'),
    },
  ];
  const secondTurn = (): Step[] => [
    {
      do: 'sh',
      cmd: http(
        3128,
        `GET http://${target()}/t2 HTTP/1.1~Host: ${target()}~Connection: close~~`,
        't2-host.txt',
      ),
    },
    {
      do: 'sh',
      cmd: http(3129, 'GET /svc/t2 HTTP/1.1~Host: x~Connection: close~~', 't2-route.txt'),
    },
    {
      do: 'sh',
      cmd: 'cat /etc/bot-bottle/current-config/allowlist.json /etc/bot-bottle/current-config/routes.json > /workspace/t2-config.txt; node /opt/bb/bb-supervise.mjs config > /workspace/t2-sidecar.txt',
    },
  ];

  for (const path of ['warm', 'cold'] as const)
    it(`an approval for one turn is gone in the next (${path})`, async () => {
      const warmMs = path === 'warm' ? 120_000 : 0;
      const from = seen.length;
      const heard = () => seen.slice(from);
      const env = { SUP_KEY: KEY, SUP_NEW_KEY: NEW_KEY };
      const decided = operator();
      const run = await rt.launch([firstTurn(), secondTurn()], {
        name: `grant${path}`,
        bottles: ['guarded'],
        env,
        warmMs,
      });
      expect(await decided).toEqual(['allowlist', 'routes']);
      // The attack ran: both grants answered in their turn.
      expect(await rt.readWorkspace(run, 't1-host.txt')).toMatch(
        /^HTTP\/1.1 200[\s\S]*answered \/t1/,
      );
      expect(await rt.readWorkspace(run, 't1-route.txt')).toMatch(
        /^HTTP\/1.1 200[\s\S]*answered \/svc\/t1/,
      );
      expect(heard()).toContainEqual({ url: '/svc/t1', key: NEW_KEY });

      const next = await rt.resume(run, 'Go on.', { env, warmMs, steps: secondTurn().length });
      // The host the operator allowed for one turn is refused again.
      expect(await rt.readWorkspace(next, 't2-host.txt')).toMatch(/^HTTP\/1.1 403/);
      // The route is gone: no key went anywhere in the second turn.
      expect(await rt.readWorkspace(next, 't2-route.txt')).toMatch(/^HTTP\/1.1 404/);
      expect(heard().map((s) => s.url)).not.toContain('/svc/t2');
      expect(heard().map((s) => s.url)).not.toContain('/t2');
      // What the agent and its sidecar read is the manifest's configuration again.
      for (const f of ['t2-config.txt', 't2-sidecar.txt']) {
        const text = (await rt.readWorkspace(next, f))!;
        expect(text, f).toContain('registry.npmjs.org');
        expect(text, f).not.toContain(`"${target()}"`);
        expect(text, f).not.toContain('/svc');
      }
    }, 240_000);
});
