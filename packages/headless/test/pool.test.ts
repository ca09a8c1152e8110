import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { acmeWorld, createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { destroy, finishTurn, launch, startLaunch } from '../src/bottle/bottles';
import { bottlePaths, readMeta, writeMeta } from '../src/bottle/layout';
import { canPool, makePooled } from '../src/bottle/pool';
import { parsePoolSizes, WarmPool } from '../src/bottle/pool-keeper';
import { secretsDir } from '../src/bottle/secrets';
import { DockerBackend } from '../src/engine/docker-backend';
import { giteaWiring, scriptAgent, writeManifests } from '../src/test-home';

const docker = await probeDocker();
const TOKEN = 'bb-pool-token-for-bottles-5c2e';
const backend = new DockerBackend();

let home: string;
let server: GiteaTestServer;
const env = () => ({ BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE });
const opts = () => ({ backend, env: env() });
const site = () => ({ kind: 'gitea', site: { FORGE_GITEA_API: server.apiUrl } });
const pooled = () => makePooled({ ...opts(), agent: 'implementer', forge: site() });

/**
 * One turn: say what it finds of anyone before it (in its home, its scratch space,
 * its workspace), then leave the same marks itself and answer on its issue.
 */
const LOOK_THEN_MARK = {
  steps: [
    {
      do: 'sh',
      cmd: 'printf "SEEN[%s]\\n" "$(cat ~/bb-mark /tmp/bb-mark /workspace/bb-mark ~/.bb/turn-end/* 2>/dev/null | tr "\\n" " ")"',
    },
    {
      do: 'sh',
      cmd: 'echo planted-by-an-earlier-issue | tee ~/bb-mark /tmp/bb-mark /workspace/bb-mark > /dev/null',
    },
    { do: 'comment', body: 'Looked around.' },
    { do: 'done', status: 'success', summary: 'Looked.' },
  ],
};

describe.skipIf(!docker.ok || !canPool(backend))('real Docker: the warm pool', () => {
  beforeAll(async () => {
    server = await createGiteaTestServer({ world: acmeWorld(TOKEN) });
    // The backend's pool of network namespaces fills on first use: full before the tests.
    const first = await backend.takeNetns();
    if (first) await backend.destroy(first);
    await new Promise((r) => setTimeout(r, 3000));
  });
  afterAll(() => server?.close());
  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bb-pool-'));
    writeManifests(home, {
      agents: { implementer: scriptAgent([LOOK_THEN_MARK]) },
      bottles: { default: { image: BASE_IMAGE, resources: { memory: '256m', pids: 128 } } },
    });
  });
  afterEach(() => rmSync(home, { recursive: true, force: true }));

  it('holds a bottle ready with no issue, no token and no repository, then binds it to a launch', async () => {
    const slug = await pooled();
    try {
      const meta = readMeta(slug, env())!;
      expect(meta.pooled?.key).toMatch(/^[0-9a-f]{64}$/);
      expect(meta.forge).toBeNull();
      const before = await backend.list({ 'bb.slug': slug });
      expect(before.map((c) => [c.labels['bb.role'], c.state]).sort()).toEqual([
        ['agent', 'running'],
        ['gate', 'running'],
      ]);
      // The holder of the network namespace its agent joined is gone: the namespace
      // lives on with the waiter in it, loopback only.
      const agentC = before.find((c) => c.labels['bb.role'] === 'agent')!;
      expect(agentC.labels['bb.netns']).toBeTruthy();
      expect(await backend.inspect(agentC.labels['bb.netns']!)).toBeUndefined();
      // Its gate has no forge settings and no secret at all: it waits for its bind file.
      const gate = before.find((c) => c.labels['bb.role'] === 'gate')!;
      expect(await backend.logs(gate.id)).not.toContain('gate serving');
      expect(readdirSync(secretsDir(slug, 'gate', env()))).toEqual([]);
      const gateEnv = execFileSync(
        'docker',
        ['inspect', '--format', '{{json .Config.Env}}', gate.id],
        {
          encoding: 'utf8',
        },
      );
      expect(gateEnv).toContain('BB_GATE_BIND=');
      expect(gateEnv).not.toContain('FORGE_');
      // An empty repository in its workspace (no commit, no file), nothing in its mirror slot.
      const p = bottlePaths(slug, env());
      expect(readdirSync(p.workspace)).toEqual(['.git']);
      expect(readdirSync(join(p.workspace, '.git', 'refs', 'heads'))).toEqual([]);
      expect(readdirSync(join(p.dir, 'pool-mirror', 'objects'))).toEqual([]);

      const issue = server.createIssue('alice', 'acme/widgets', { title: 'Look around' });
      const progress: string[] = [];
      await startLaunch({
        ...opts(),
        slug,
        agent: 'implementer',
        prompt: 'Look around',
        forge: giteaWiring(server, TOKEN, issue),
        onProgress: (m) => progress.push(m),
      });
      expect(progress.join('\n')).toContain(`binding pooled bottle ${slug}`);
      // The same containers serve the turn: none was made for it.
      const during = await backend.list({ 'bb.slug': slug });
      expect(during.map((c) => c.id).sort()).toEqual(before.map((c) => c.id).sort());
      const outcome = await finishTurn(slug, opts());
      expect(outcome.ok).toBe(true);
      expect(outcome.output).toContain('SEEN[]');
      const bound = readMeta(slug, env())!;
      expect(bound.pooled).toBeUndefined();
      expect(bound.status).toBe('frozen');
      expect(bound.forge?.issue).toBe(issue);
      expect(bound.baseCommit).toMatch(/^[0-9a-f]{40}$/);
      // The agent had its repository (a checkout), and wrote on its own issue.
      const comments = server.repos.get('acme/widgets')!.issues.get(issue)!.comments;
      expect(comments.map((c) => c.body)).toContain('Looked around.');
      // A frozen bottle holds no mount: the mirror slot was let go.
      expect(existsSync(join(p.dir, 'pool-mirror', 'objects', 'pack'))).toBe(false);
    } finally {
      await destroy(slug, opts());
    }
  }, 120_000);

  it('a pooled bottle carries nothing from one issue to the next, and is used once', async () => {
    const [a, b] = await Promise.all([pooled(), pooled()]);
    try {
      expect(a).not.toBe(b);
      const first = server.createIssue('alice', 'acme/widgets', { title: 'First' });
      const second = server.createIssue('alice', 'acme/widgets', { title: 'Second' });
      const one = await launch({
        ...opts(),
        slug: a,
        agent: 'implementer',
        prompt: 'First',
        forge: giteaWiring(server, TOKEN, first),
      });
      expect(one.ok).toBe(true);
      expect(one.output).toContain('SEEN[]');
      // The next issue gets another pooled bottle: nothing the first left is in it.
      const two = await launch({
        ...opts(),
        slug: b,
        agent: 'implementer',
        prompt: 'Second',
        forge: giteaWiring(server, TOKEN, second),
      });
      expect(two.ok).toBe(true);
      expect(two.output).toContain('SEEN[]');
      expect(two.output).not.toContain('planted-by-an-earlier-issue');
      // Each gate wrote to its own issue only.
      const issues = server.repos.get('acme/widgets')!.issues;
      expect(issues.get(first)!.comments.map((c) => c.body)).toEqual(['Looked around.']);
      expect(issues.get(second)!.comments.map((c) => c.body)).toEqual(['Looked around.']);
      // A pooled bottle is used once: bound, it is a bottle of its issue, never pooled again.
      expect(readMeta(a, env())!.pooled).toBeUndefined();
      const third = server.createIssue('alice', 'acme/widgets', { title: 'Third' });
      await expect(
        startLaunch({
          ...opts(),
          slug: a,
          agent: 'implementer',
          prompt: 'Third',
          forge: giteaWiring(server, TOKEN, third),
        }),
      ).rejects.toThrow(`a bottle named ${a} already exists`);
      expect(issues.get(third)!.comments).toEqual([]);
    } finally {
      await Promise.all([destroy(a, opts()), destroy(b, opts())]);
    }
  }, 180_000);

  it('a pooled bottle made for other settings is not used: the launch goes on afresh', async () => {
    const slug = await pooled();
    // The operator gave the bottle more memory since: its containers were made for less.
    writeManifests(home, {
      agents: { implementer: scriptAgent([LOOK_THEN_MARK]) },
      bottles: { default: { image: BASE_IMAGE, resources: { memory: '384m', pids: 128 } } },
    });
    const before = (await backend.list({ 'bb.slug': slug })).map((c) => c.id);
    const issue = server.createIssue('alice', 'acme/widgets', { title: 'Afresh' });
    const progress: string[] = [];
    try {
      const started = await startLaunch({
        ...opts(),
        slug,
        agent: 'implementer',
        prompt: 'Afresh',
        forge: giteaWiring(server, TOKEN, issue),
        onProgress: (m) => progress.push(m),
      });
      expect(progress.join('\n')).toContain(
        'cannot serve this launch (what its containers were made for changed',
      );
      const listed = await backend.list({ 'bb.slug': slug });
      const now = listed.map((c) => c.id);
      expect(now.some((id) => before.includes(id))).toBe(false);
      // An ordinary launch's agent lets go of its namespace's holder too, once it runs.
      const holder = listed.find((c) => c.labels['bb.role'] === 'agent')!.labels['bb.netns'];
      expect(holder).toBeTruthy();
      await vi.waitFor(async () => expect(await backend.inspect(holder!)).toBeUndefined(), {
        timeout: 10_000,
      });
      expect((await finishTurn(started.slug, opts())).ok).toBe(true);
    } finally {
      await destroy(slug, opts());
    }
  }, 120_000);

  it('keeps the pool filled while there is room, hands each bottle out once, and removes what it holds at close', async () => {
    const made: string[] = [];
    const log: Array<Record<string, unknown>> = [];
    let room = true;
    const pool = new WarmPool({
      ...opts(),
      sizes: parsePoolSizes('implementer:1'),
      forge: site(),
      log: (e) => log.push(e),
      retryMs: 50,
    });
    try {
      pool.fill({ room: () => room, made: (slug) => made.push(slug) });
      await vi.waitFor(() => expect(pool.held()).toHaveLength(1), { timeout: 60_000 });
      const first = pool.take('implementer')!;
      expect(first).toBe(made[0]);
      expect(pool.owns(first)).toBe(false);
      // No room: nothing is made, and nothing is there to take.
      room = false;
      expect(pool.take('implementer')).toBeUndefined();
      await new Promise((r) => setTimeout(r, 500));
      expect(pool.held()).toEqual([]);
      // Room again: a new bottle, never the one handed out.
      room = true;
      await vi.waitFor(() => expect(pool.held()).toHaveLength(1), { timeout: 60_000 });
      const second = pool.take('implementer')!;
      expect(second).not.toBe(first);
      expect(pool.take('reviewer')).toBeUndefined();
      await vi.waitFor(() => expect(pool.held()).toHaveLength(1), { timeout: 60_000 });
      const third = pool.held()[0]!.slug;
      await pool.close();
      expect(readMeta(third, env())).toBeUndefined();
      expect(await backend.list({ 'bb.slug': third })).toEqual([]);
      for (const s of [first, second]) await destroy(s, opts());
    } finally {
      await pool.close();
    }
  }, 180_000);

  it('removes the pooled bottles a process before it left, and only those', async () => {
    const [left, mine] = await Promise.all([pooled(), pooled()]);
    // `left` was made by a process that is gone (a crash): nobody will ever bind it.
    const meta = readMeta(left, env())!;
    writeMeta(
      {
        ...meta,
        pooled: { ...meta.pooled!, owner: { host: meta.pooled!.owner!.host, pid: 2 ** 22 + 1 } },
      },
      env(),
    );
    const pool = new WarmPool({ ...opts(), sizes: parsePoolSizes('implementer:1'), forge: site() });
    try {
      pool.fill({ room: () => false });
      await vi.waitFor(() => expect(readMeta(left, env())).toBeUndefined(), { timeout: 30_000 });
      expect(await backend.list({ 'bb.slug': left })).toEqual([]);
      // Still its live process's (this one's): left alone.
      expect(readMeta(mine, env())?.pooled).toBeDefined();
    } finally {
      await pool.close();
      await destroy(mine, opts());
    }
  }, 120_000);

  it('says what is wrong with a BB_POOL value', () => {
    expect([...parsePoolSizes('implementer:4, reviewer:1')]).toEqual([
      ['implementer', 4],
      ['reviewer', 1],
    ]);
    expect(parsePoolSizes('off').size).toBe(0);
    expect(parsePoolSizes(' OFF ').size).toBe(0);
    expect(() => parsePoolSizes('implementer')).toThrow(
      'BB_POOL "implementer": "implementer" must be <agent>:<n>, each agent once, n from 1 to 32',
    );
    expect(() => parsePoolSizes('a:1,a:2')).toThrow('each agent once');
    expect(() => parsePoolSizes('a:0')).toThrow('n from 1 to 32');
    expect(() => parsePoolSizes('a:33')).toThrow('n from 1 to 32');
  });
});
