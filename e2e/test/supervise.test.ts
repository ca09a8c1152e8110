// The supervise plane end to end on real Docker: a script agent in a real bottle is
// refused, asks for the change with bb-supervise (as pi would; claude and codex use
// the same sidecar through MCP), the operator decides on the host through the desk
// `bb supervise` uses, and the agent carries on. The engine's events are watched
// the whole time: no exec into, and no attach to, any container of these bottles.
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { destroy, homeLabel, readMeta } from '@bb/headless';
import type { Policy, RequestView, SuperviseDesk } from '@bb/supervise';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approveForTurn,
  askForHost,
  askForSvcRoute,
  askSupervise,
  editConfig,
  guardedBench,
  RedTeam,
  rawHttp,
  type Step,
  type startUpstream,
} from './redteam/harness';

const docker = await probeDocker();
const KEY = 'sk-supervise-e2e-key-8d1f3a2c77';
const NEW_KEY = 'sk-supervise-e2e-new-key-41be09d2';

/** A raw HTTP request through a bottle port, its answer appended to a workspace file. */
const http = (port: number, head: string, out: string) => rawHttp(port, head, out, true);
const supervise = askSupervise;

describe.skipIf(!docker.ok)(
  'supervise: stuck agents are unblocked without entering their bottle',
  // Each test launches a real bottle and waits on an operator; on two busy cores a
  // launch alone can take most of the default 30 s.
  { timeout: 120_000 },
  () => {
    const rt = new RedTeam();
    let upstream: Awaited<ReturnType<typeof startUpstream>>;
    let port = 0;
    let seen: Array<{ url: string; key: unknown }> = [];
    let events: ChildProcess;
    let eventLog = '';
    let policy: Policy;

    const desk = () => rt.desk(policy, { SUP_NEW_KEY: NEW_KEY });

    /** The operator: wait for the next pending request, then act on it. */
    const operator = async (
      act: (d: SuperviseDesk, r: RequestView) => Promise<unknown> | unknown,
    ) => {
      const d = desk();
      for (let i = 0; i < 600; i++) {
        const [r] = await d.list({ status: 'pending' });
        if (r) return act(d, r);
        await new Promise((res) => setTimeout(res, 100));
      }
      throw new Error('no request reached the operator');
    };

    beforeAll(async () => {
      await rt.start();
      ({ upstream, policy } = await guardedBench(rt, '/anthropic'));
      port = upstream.port;
      seen = upstream.seen;
      // Every exec or attach on this run's containers, as the engine reports it.
      events = spawn('docker', [
        'events',
        '--filter',
        `label=bb.home=${homeLabel(rt.env)}`,
        '--filter',
        'type=container',
        '--format',
        '{{.Action}} {{.Actor.Attributes.name}}',
      ]);
      events.stdout!.on('data', (d) => (eventLog += d.toString()));
    });
    afterAll(async () => {
      events?.kill();
      upstream?.close();
      await rt.stop();
    });

    const launch = (steps: Step[][], name: string, partial = false) =>
      rt.launch(steps, {
        name,
        bottles: ['guarded'],
        env: { SUP_KEY: KEY, SUP_NEW_KEY: NEW_KEY },
        partial,
      });

    it('pipelock-block: a refused host is approved, the proxy reloads, and the same turn reaches it', async () => {
      const target = `127.0.0.1:${port}`;
      const agent = launch(
        [
          [
            {
              do: 'sh',
              cmd: http(
                3128,
                `GET http://${target}/first HTTP/1.1~Host: ${target}~Connection: close~~`,
                'before.txt',
              ),
            },
            {
              do: 'sh',
              cmd: editConfig('allowlist.json', `c.allow.push('${target}')`, 'allow.json'),
            },
            {
              do: 'sh',
              cmd: supervise(
                `pipelock-block --file /tmp/allow.json --why 'the test service on ${target} serves the fixtures' --wait 120`,
                'answer.json',
              ),
            },
            {
              do: 'sh',
              cmd: http(
                3128,
                `GET http://${target}/second HTTP/1.1~Host: ${target}~Connection: close~~`,
                'after.txt',
              ),
            },
          ],
        ],
        'allow',
      );
      let view: RequestView | undefined;
      await operator(async (d, r) => {
        view = r;
        await d.approve(r.id, {
          by: 'alice',
          via: 'cli',
          scope: 'turn',
          expect: { baseHash: r.baseHash, candidateHash: r.candidateHash },
        });
      });
      const run = await agent;
      // The refusal told the agent what to call and which file to start from.
      const before = (await rt.readWorkspace(run, 'before.txt'))!;
      expect(before).toMatch(/^HTTP\/1.1 403/);
      expect(before).toContain('"tool":"pipelock-block"');
      expect(before).toContain('/etc/bot-bottle/current-config/allowlist.json');
      // The operator saw the denial that triggered it, the justification and the diff.
      expect(view!).toMatchObject({
        kind: 'allowlist',
        tool: 'pipelock-block',
        slug: run.slug,
        turn: 1,
      });
      expect(view!.evidence).toEqual([
        expect.objectContaining({ kind: 'egress', host: '127.0.0.1', port }),
      ]);
      expect(view!.diff).toContain(`+    "${target}"`);
      expect(view!.findings.map((f) => f.code)).toContain('internal-address');
      expect(JSON.parse((await rt.readWorkspace(run, 'answer.json'))!)).toMatchObject({
        status: 'approved',
      });
      expect((await rt.readWorkspace(run, 'answer.json.code'))!.trim()).toBe('0');
      expect(await rt.readWorkspace(run, 'after.txt')).toMatch(
        /^HTTP\/1.1 200[\s\S]*upstream answered \/second/,
      );
      expect(seen.map((s) => s.url)).toContain('/second');
      expect(seen.map((s) => s.url)).not.toContain('/first');
      // Scope "turn": at the turn's end the bottle shows its manifest's allowlist again
      // (the next turns start from it: e2e/test/redteam/grants.test.ts).
      expect(
        JSON.parse(
          (await import('node:fs')).readFileSync(
            join(run.dir, 'current-config', 'allowlist.json'),
            'utf8',
          ),
        ).allow,
      ).toEqual(['registry.npmjs.org']);
    });

    it('cred-proxy-block: a new route with a new secret is approved over the ceiling, and the key never reaches the agent', async () => {
      const agent = launch(
        [
          [
            {
              do: 'sh',
              cmd: http(3129, 'GET /svc/items HTTP/1.1~Host: x~Connection: close~~', 'before.txt'),
            },
            ...askForSvcRoute(port, 'the svc API lists the items I must fix', 'answer.json'),
            {
              do: 'sh',
              cmd: http(3129, 'GET /svc/items HTTP/1.1~Host: x~Connection: close~~', 'after.txt'),
            },
            {
              do: 'sh',
              cmd: 'cat /etc/bot-bottle/current-config/routes.json > /workspace/config-after.json; env > /workspace/env.txt',
            },
          ],
        ],
        'routes',
      );
      await operator(async (d, r) => {
        expect(r.findings.map((f) => f.code)).toEqual(
          expect.arrayContaining(['secret-new', 'internal-address']),
        );
        expect(r.beyondCeiling).toEqual([expect.stringContaining('SUP_NEW_KEY')]);
        await expect(d.approve(r.id, { by: 'alice', via: 'cli' })).rejects.toThrow(
          /beyond the operator's ceiling/,
        );
        const o = await d.approve(r.id, {
          by: 'alice',
          via: 'cli',
          override: true,
          scope: 'bottle',
        });
        expect(o.remediation).toMatchObject({ ok: true });
      });
      const run = await agent;
      const before = (await rt.readWorkspace(run, 'before.txt'))!;
      expect(before).toMatch(/^HTTP\/1.1 404/);
      expect(before).toContain('"tool":"cred-proxy-block"');
      expect(await rt.readWorkspace(run, 'after.txt')).toMatch(
        /^HTTP\/1.1 200[\s\S]*upstream answered \/svc\/items/,
      );
      expect(seen.at(-1)).toEqual({ url: '/svc/items', key: NEW_KEY });
      // The bottle reads the new routes (references only) and never the key.
      expect(await rt.readWorkspace(run, 'config-after.json')).toContain('env:SUP_NEW_KEY');
      for (const f of ['before.txt', 'after.txt', 'answer.json', 'env.txt', 'config-after.json'])
        expect(await rt.readWorkspace(run, f)).not.toContain(NEW_KEY);
      // Scope "bottle": kept for the bottle's later turns.
      expect(
        (await import('node:fs')).readFileSync(join(run.dir, 'overrides', 'routes.json'), 'utf8'),
      ).toContain('/svc');
    });

    it('a bottle whose manifest names no host and no route is unblocked in the same turn', async () => {
      const target = `127.0.0.1:${port}`;
      const get = (bridge: number, path: string, out: string) =>
        http(bridge, `GET ${path} HTTP/1.1~Host: ${target}~Connection: close~~`, out);
      // The default bottle: its image, nothing allowed, no credential route. Its agent
      // starts without waiting for the standby proxies: this one waits until the egress
      // proxy answers (the bridge's port may take a connection before the proxy behind it
      // listens, and then closes it unanswered).
      const bridgeUp = `for i in $(seq 100); do node -e "require('http').get({host:'127.0.0.1',port:3128,path:'http://${target}/ready',headers:{host:'${target}'}},r=>process.exit(r.statusCode?0:1)).on('error',()=>process.exit(1))" && break; sleep 0.05; done`;
      const agent = rt.launch(
        [
          [
            { do: 'sh', cmd: bridgeUp },
            { do: 'sh', cmd: get(3128, `http://${target}/bare-first`, 'before.txt') },
            ...askForHost(target, `the fixtures are on ${target}`, 'a1.json'),
            { do: 'sh', cmd: get(3128, `http://${target}/bare-second`, 'after.txt') },
            ...askForSvcRoute(port, 'the svc API lists the items', 'a2.json'),
            { do: 'sh', cmd: get(3129, '/svc/bare', 'svc.txt') },
          ],
        ],
        { name: 'bare', bottles: ['default'], env: { SUP_NEW_KEY: NEW_KEY } },
      );
      for (const kind of ['allowlist', 'routes'])
        await operator(async (d, r) => {
          expect(r.kind).toBe(kind);
          await approveForTurn(d, r);
        });
      const run = await agent;
      const before = (await rt.readWorkspace(run, 'before.txt'))!;
      expect(before).toMatch(/^HTTP\/1.1 403/);
      expect(before).toContain('"tool":"pipelock-block"');
      expect(await rt.readWorkspace(run, 'after.txt')).toMatch(
        /^HTTP\/1.1 200[\s\S]*upstream answered \/bare-second/,
      );
      expect(await rt.readWorkspace(run, 'svc.txt')).toMatch(
        /^HTTP\/1.1 200[\s\S]*upstream answered \/svc\/bare/,
      );
      expect(seen).toContainEqual({ url: '/svc/bare', key: NEW_KEY });
      expect(seen.map((x) => x.url)).not.toContain('/bare-first');
    });

    it("rejected and modified: the agent hears the reason verbatim, or gets the operator's file", async () => {
      const rejected = launch(
        [
          [
            {
              do: 'sh',
              cmd: editConfig('allowlist.json', "c.allow.push('*.evil.test')", 'allow.json'),
            },
            {
              do: 'sh',
              cmd: supervise(
                "pipelock-block --file /tmp/allow.json --why 'I want to reach evil.test' --wait 120",
                'answer.json',
              ),
            },
          ],
        ],
        'rejected',
      );
      await operator((d, r) =>
        d.reject(r.id, 'No: use the mirror at registry.npmjs.org instead.', {
          by: 'alice',
          via: 'cli',
        }),
      );
      const r1 = await rejected;
      expect(JSON.parse((await rt.readWorkspace(r1, 'answer.json'))!)).toMatchObject({
        status: 'rejected',
        reason: 'No: use the mirror at registry.npmjs.org instead.',
      });
      expect((await rt.readWorkspace(r1, 'answer.json.code'))!.trim()).toBe('4');

      const target = `127.0.0.1:${port}`;
      const modified = launch(
        [
          [
            {
              do: 'sh',
              cmd: editConfig(
                'allowlist.json',
                `c.allow.push('${target}','other.example.com')`,
                'allow.json',
              ),
            },
            {
              do: 'sh',
              cmd: supervise(
                "pipelock-block --file /tmp/allow.json --why 'two hosts for the tests' --wait 120",
                'answer.json',
              ),
            },
            {
              do: 'sh',
              cmd: http(
                3128,
                `GET http://${target}/modified HTTP/1.1~Host: ${target}~Connection: close~~`,
                'after.txt',
              ),
            },
          ],
        ],
        'modified',
      );
      const mine = `${JSON.stringify({ allow: ['registry.npmjs.org', target] }, null, 2)}\n`;
      await operator((d, r) => d.approve(r.id, { by: 'alice', via: 'cli', edited: mine }));
      const r2 = await modified;
      expect(JSON.parse((await rt.readWorkspace(r2, 'answer.json'))!)).toMatchObject({
        status: 'modified',
        file: mine,
      });
      expect(await rt.readWorkspace(r2, 'after.txt')).toMatch(/^HTTP\/1.1 200/);
    });

    it('expired: nobody decides within the TTL', async () => {
      writeFileSync(join(rt.home, 'config', 'supervise.json'), JSON.stringify({ ttlMs: 1500 }));
      try {
        const run = await launch(
          [
            [
              {
                do: 'sh',
                cmd: editConfig('allowlist.json', "c.allow.push('pypi.org')", 'allow.json'),
              },
              {
                do: 'sh',
                cmd: supervise(
                  "pipelock-block --file /tmp/allow.json --why 'pip needs pypi.org' --wait 30",
                  'answer.json',
                ),
              },
            ],
          ],
          'expired',
        );
        expect(JSON.parse((await rt.readWorkspace(run, 'answer.json'))!)).toMatchObject({
          status: 'expired',
        });
        expect((await rt.readWorkspace(run, 'answer.json.code'))!.trim()).toBe('5');
        const d = desk();
        await d.sync();
        expect((await d.list({ status: 'expired' })).map((r) => r.slug)).toContain(run.slug);
      } finally {
        writeFileSync(join(rt.home, 'config', 'supervise.json'), '{}');
      }
    });

    it('capability-block: the image is rebuilt on the host and the agent continues in it, same workspace and session', async () => {
      const dockerfile = `FROM ${BASE_IMAGE}\nUSER 0\nRUN printf '#!/bin/sh\\necho newtool-works\\n' > /usr/bin/newtool && chmod 755 /usr/bin/newtool\nUSER 1000\n`;
      const b64 = Buffer.from(dockerfile).toString('base64');
      const run = await (async () => {
        const agent = launch(
          [
            [
              {
                do: 'sh',
                cmd: 'echo from-turn-one > /workspace/kept.txt; newtool > /workspace/tool-before.txt 2>&1 || true',
              },
              { do: 'sh', cmd: `echo ${b64} | base64 -d > /tmp/Dockerfile` },
              {
                do: 'sh',
                cmd: supervise(
                  "capability-block --file /tmp/Dockerfile --why 'the tests call newtool, which the image lacks' --wait 120",
                  'answer.json',
                ),
              },
              // As told: the turn ends here, and goes on in the rebuilt image.
              { do: 'exit', code: 0 },
            ],
            [
              {
                do: 'sh',
                cmd: 'newtool > /workspace/tool-after.txt; cat /workspace/kept.txt >> /workspace/tool-after.txt',
              },
            ],
          ],
          'capable',
          // The outcome is the second turn's, in the rebuilt image.
          true,
        );
        await operator(async (d, r) => {
          expect(r.kind).toBe('dockerfile');
          expect(r.diff).toContain('+RUN printf');
          const out = await d.approve(r.id, { by: 'alice', via: 'cli' });
          expect(out.remediation).toMatchObject({ ok: true });
        });
        return agent;
      })();
      expect(await rt.readWorkspace(run, 'tool-before.txt')).toMatch(/not found/);
      expect(await rt.readWorkspace(run, 'tool-after.txt')).toBe('newtool-works\nfrom-turn-one\n');
      const meta = readMeta(run.slug, rt.env)!;
      expect(meta.image).toMatch(/^bb-rebuilt-/);
      expect(meta.turns).toHaveLength(2);
      expect(meta.turns[1]!.prompt).toMatch(/approved your capability-block request sr_/);
      // The same conversation: the script agent keeps its session id across turns.
      expect(run.outcome.sessionId).toBe(meta.sessionId);
      expect(run.outcome.ok).toBe(true);
      // The rebuilt image belongs to the bottle: destroying it removes the image too.
      const images = () => new Docker().listImages({ filters: { label: [`bb.slug=${run.slug}`] } });
      expect(await images()).toHaveLength(1);
      await destroy(run.slug, { backend: rt.backend, env: rt.env });
      expect(await images()).toEqual([]);
    }, 180_000);

    it('nobody ever executed into or attached to a container of these bottles', async () => {
      await new Promise((r) => setTimeout(r, 500));
      // The watch saw the run: it is not vacuous.
      expect(eventLog).toMatch(/^start bb-/m);
      expect(eventLog).not.toMatch(/^(exec_create|exec_start|attach)/m);
    });
  },
);
