import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  acmeWorld,
  createGiteaTestServer,
  type GiteaTestServer,
  pushCommit,
} from '@bb/forge/testing';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  cool,
  destroy,
  finishTurn,
  launch,
  resume,
  startLaunch,
  stopAgent,
} from '../src/bottle/bottles';
import { bottlePaths, type ForgeWiring, readMeta } from '../src/bottle/layout';
import { DockerBackend } from '../src/engine/docker-backend';
import {
  giteaWiring,
  prSteps,
  scriptAgent,
  writeManifests as writeTestManifests,
} from '../src/test-home';

const docker = await probeDocker();
const TOKEN = 'bb-warm-token-for-bottles-77a1';
const backend = new DockerBackend();
const WINDOW = 120_000;

let home: string;
let server: GiteaTestServer;
let issue = 0;
const env = () => ({ BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE });
const opts = (warmMs = WINDOW) => ({ backend, env: env(), warmMs });

function writeManifests(
  turns: unknown[],
  resources: Record<string, unknown> = {},
  bottle: Record<string, unknown> = {},
) {
  writeTestManifests(home, {
    agents: { implementer: scriptAgent(turns) },
    bottles: {
      default: {
        image: BASE_IMAGE,
        resources: { memory: '256m', pids: 128, ...resources },
        ...bottle,
      },
    },
  });
}
const OPEN_PR = {
  steps: [
    // Something left running in the background: the turn's end takes it too.
    { do: 'sh', cmd: '(sleep 300 > /dev/null 2>&1 &)' },
    ...prSteps({
      path: 'fix.txt',
      content: 'turn {{turn}}\n',
      message: 'Fix',
      title: 'Fix',
      body: 'fix',
    }),
    { do: 'done', status: 'success', summary: 'Opened the PR.' },
  ],
};
const ANSWER = {
  steps: [
    { do: 'comment', body: 'Turn {{turn}}; earlier: {{previousPrompts}}' },
    { do: 'done', status: 'success', summary: 'Answered.' },
  ],
};
const wiring = (n: number): ForgeWiring => giteaWiring(server, TOKEN, n);
/** Somebody pushes one commit adding `file` to `branch`, as a git client would. */
const humanPush = (branch: string, file: string) =>
  pushCommit({
    cloneUrl: server.cloneUrl('acme/widgets'),
    token: TOKEN,
    branch,
    file,
    content: 'a person was here\n',
  });
/** Launch the implementer on this test's issue. */
const launchAgent = (prompt: string, warmMs = WINDOW) =>
  launch({ ...opts(warmMs), agent: 'implementer', prompt, forge: wiring(issue) });
/** Resume `slug`'s agent with `prompt`, its PR `pr`. */
const resumeAgent = (slug: string, prompt: string, pr: number, warmMs = WINDOW) =>
  resume({ ...opts(warmMs), slug, prompt, forgeToken: TOKEN, pr });
const containersOf = (slug: string) => backend.list({ 'bb.slug': slug });
const prOf = (slug: string) => {
  const branch = readMeta(slug, env())!.branch;
  return [...server.repos.get('acme/widgets')!.issues.values()].find(
    (i) => i.pull?.headRef === branch,
  )!.number;
};

describe.skipIf(!docker.ok)('real Docker: warm bottles', () => {
  beforeAll(async () => {
    server = await createGiteaTestServer({
      world: acmeWorld(TOKEN),
    });
  });
  afterAll(() => server?.close());
  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bb-warm-'));
    issue = server.createIssue('alice', 'acme/widgets', { title: 'Fix the thing' });
  });
  afterEach(() => rmSync(home, { recursive: true, force: true }));

  it('keeps a bottle warm after its turn and runs the next turn in the same containers', async () => {
    writeManifests([OPEN_PR, ANSWER]);
    const first = await launchAgent('Fix it');
    try {
      expect(first.ok).toBe(true);
      expect(first.warm?.bytes).toBeGreaterThan(0);
      const meta = readMeta(first.slug, env())!;
      expect(meta.status).toBe('frozen');
      expect(meta.warm?.agent).toBeTruthy();
      // Both containers are there, paused: nothing in them runs.
      const held = await containersOf(first.slug);
      expect(held.map((c) => [c.labels['bb.role'], c.state]).sort()).toEqual([
        ['agent', 'paused'],
        ['gate', 'paused'],
      ]);
      // Nothing but the engine's init and the waiter is left of the turn (its background
      // sleep included).
      expect(await backend.processes(meta.warm!.agent)).toBe(2);

      const progress: string[] = [];
      const second = await resume({
        ...opts(),
        onProgress: (m) => progress.push(m),
        slug: first.slug,
        prompt: 'And the docs?',
        forgeToken: TOKEN,
        pr: prOf(first.slug),
      });
      expect(second.ok).toBe(true);
      expect(progress.join('\n')).toContain(`resuming warm bottle ${first.slug} (turn 2)`);
      // The same containers: no new one was made.
      const after = await containersOf(first.slug);
      expect(after.map((c) => c.id).sort()).toEqual(held.map((c) => c.id).sort());
      // The same conversation, and this turn's output only.
      const comments = server.issue('acme/widgets', issue).comments.map((c) => c.body);
      expect(comments.at(-1)).toBe('Turn 2; earlier: Fix it');
      expect(second.output).toContain('"turn":2');
      expect(second.output).not.toContain('"turn":1');
      expect(second.sessionId).toBe(first.sessionId);

      // Cooling removes them, as any freeze does.
      expect(await cool(first.slug, opts())).toBe(true);
      expect(await containersOf(first.slug)).toEqual([]);
      expect(readMeta(first.slug, env())!.warm).toBeNull();
      expect(await cool(first.slug, opts())).toBe(false);
    } finally {
      await destroy(first.slug, opts());
    }
  });

  it("serves the bottle's ports with bb-relay in every turn, the waiter starting it with each turn, and a warm container idles without it", async () => {
    const urls: string[] = [];
    const upstream = createServer((req, res) => {
      urls.push(req.url ?? '');
      res.end('ok');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const port = (upstream.address() as AddressInfo).port;
    // Through port 3128, with how many bb-relay serve the bottle's ports.
    const ask = (name: string) => ({
      do: 'sh',
      cmd: `n=$(cat /proc/[0-9]*/comm | grep -c bb-relay); node -e "require('http').get({host:'127.0.0.1',port:3128,path:'http://127.0.0.1:${port}/${name}-'+process.argv[1],headers:{host:'127.0.0.1:${port}'}},(r)=>r.resume())" "$n"`,
    });
    writeManifests(
      [{ steps: [ask('first'), ...OPEN_PR.steps] }, { steps: [ask('second'), ...ANSWER.steps] }],
      {},
      { egress: { allow: [`127.0.0.1:${port}`] } },
    );
    const first = await launchAgent('Go');
    try {
      expect(first.ok).toBe(true);
      expect(first.warm).toBeTruthy();
      const second = await resumeAgent(first.slug, 'Again', prOf(first.slug));
      expect(second.ok).toBe(true);
      expect(second.output).not.toContain('served by the bridge itself');
      // bb-relay served both ports (3128, 3129) in each turn: the turn's bridge's, then the waiter's.
      expect(urls).toEqual(['/first-2', '/second-2']);
    } finally {
      await destroy(first.slug, opts());
      upstream.close();
    }
  });

  it('cools instead of resuming warm when the window is over, the configuration changed or the PR branch moved', async () => {
    writeManifests([OPEN_PR, ANSWER]);
    const first = await launchAgent('Fix it', 1500);
    try {
      const pr = prOf(first.slug);
      const before = (await containersOf(first.slug)).map((c) => c.id);
      await new Promise((r) => setTimeout(r, 1600));
      // Its window is over: a new pair of containers runs the turn.
      const second = await resumeAgent(first.slug, 'Once more', pr, WINDOW);
      expect(second.ok).toBe(true);
      const now = (await containersOf(first.slug)).map((c) => c.id);
      expect(now.some((id) => before.includes(id))).toBe(false);

      // Made for another memory limit: cooled, the turn in new containers.
      writeManifests([OPEN_PR, ANSWER], { memory: '384m' });
      const third = await resumeAgent(first.slug, 'Again', pr);
      expect(third.ok).toBe(true);
      const agent3 = (await containersOf(first.slug)).find((c) => c.labels['bb.role'] === 'agent')!;
      expect(now).not.toContain(agent3.id);
      expect(agent3.isolation.memoryBytes).toBe(384 * 1024 * 1024);

      // Somebody pushed to the PR branch: the turn needs it brought over, so it runs cold.
      await humanPush(readMeta(first.slug, env())!.branch, 'other.txt');
      const fourth = await resumeAgent(first.slug, 'Look at what alice pushed', pr);
      expect(fourth.ok).toBe(true);
      const agent4 = (await containersOf(first.slug)).find((c) => c.labels['bb.role'] === 'agent')!;
      expect(agent4.id).not.toBe(agent3.id);
      // Brought over: the checkout has the person's commit (the bottle, warm again, keeps its disk).
      expect(existsSync(join(bottlePaths(first.slug, env()).workspace, 'other.txt'))).toBe(true);
    } finally {
      await destroy(first.slug, opts());
    }
  });

  it('does not keep warm a bottle whose agent said its turn ended while it still ran', async () => {
    // The agent writes the waiter's word itself, then goes on working.
    writeManifests([
      {
        steps: [
          {
            do: 'sh',
            // Its own turn's nonce is in its environment: the word is the waiter's, forged.
            cmd: 'mkdir -p "$HOME/.bb/turn-end" && echo 0 > "$HOME/.bb/turn-end/1-$BB_TURN_NONCE.exit" && (sleep 300 > /dev/null 2>&1 &) && sleep 3',
          },
          { do: 'done', status: 'success', summary: 'ok' },
        ],
      },
    ]);
    const first = await launchAgent('Go');
    try {
      expect(first.warm).toBeUndefined();
      expect(readMeta(first.slug, env())!.warm ?? null).toBeNull();
      // Frozen the ordinary way: nothing of it is left.
      expect(await containersOf(first.slug)).toEqual([]);
      expect(bottlePaths(first.slug, env()).dir).toBeTruthy();
    } finally {
      await destroy(first.slug, opts());
    }
  });

  it('stops a warm-capable agent as any other: told first (SIGTERM), the bottle frozen at once, not kept warm', async () => {
    writeManifests([{ steps: [{ do: 'sleep', ms: 60_000 }] }]);
    const started = await startLaunch({
      ...opts(),
      agent: 'implementer',
      prompt: 'Take your time',
      forge: wiring(issue),
    });
    try {
      await new Promise((r) => setTimeout(r, 1500));
      const t0 = Date.now();
      await stopAgent(started.slug, opts(), 10_000);
      const outcome = await finishTurn(started.slug, opts());
      // Its own process was told (the exit of a TERM), well before the stop's 10 s were up.
      expect(outcome.exitCode).toBe(143);
      expect(Date.now() - t0).toBeLessThan(5000);
      expect(outcome.warm).toBeUndefined();
      expect(await containersOf(started.slug)).toEqual([]);
    } finally {
      await destroy(started.slug, opts());
    }
  });
});
