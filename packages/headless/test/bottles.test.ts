// Whole bottles on a real Docker engine: a script agent in a bottle, its forge
// sidecar beside it, the Gitea-compatible test server as the forge.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { acmeWorld, createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { destroy, launch, mountBottleDisk, resume } from '../src/bottle/bottles';
import { bottleDir, bottlePaths, type ForgeWiring, readMeta } from '../src/bottle/layout';
import { canMountDisks } from '../src/engine/disk';
import { DockerBackend } from '../src/engine/docker-backend';
import {
  giteaWiring,
  prSteps,
  scriptAgent,
  writeManifests as writeTestManifests,
} from '../src/test-home';

const docker = await probeDocker();
const TOKEN = 'bb-claude-token-for-bottles-5e1f';
const backend = new DockerBackend();

const SCRIPT = {
  turns: [
    {
      steps: [
        { do: 'read_issue' },
        { do: 'comment', body: 'Working on it: {{prompt}}' },
        ...prSteps({
          path: 'fix.txt',
          content: 'fixed in turn {{turn}}\n',
          message: 'Fix the thing',
          title: 'Fix the thing',
          body: 'Done as asked.',
        }),
        { do: 'done', status: 'success', summary: 'Opened the PR.' },
      ],
    },
    {
      steps: [
        {
          do: 'comment',
          body: 'Turn {{turn}} (session {{session}}). Earlier prompts: {{previousPrompts}}',
        },
        { do: 'done', status: 'success', summary: 'Answered.' },
      ],
    },
  ],
};

let home: string;
let server: GiteaTestServer;
const env = () => ({ BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE });
function writeManifests(script: { turns: unknown[] } = SCRIPT, image = BASE_IMAGE) {
  writeTestManifests(home, {
    agents: { implementer: scriptAgent(script.turns) },
    bottles: { default: { image, resources: { memory: '256m', pids: 128 } } },
  });
}
const wiring = (): ForgeWiring => giteaWiring(server, TOKEN);

describe.skipIf(!docker.ok)('real Docker: launch, freeze, resume, destroy', () => {
  beforeAll(async () => {
    server = await createGiteaTestServer({
      world: acmeWorld(TOKEN, {
        issues: [
          {
            repo: 'acme/widgets',
            title: 'Fix the thing',
            author: 'alice',
            labels: ['bot-bottle:implementer'],
            assignees: ['bb-claude'],
          },
        ],
      }),
    });
  });
  afterAll(() => server?.close());
  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bb-home-'));
  });
  afterEach(() => rmSync(home, { recursive: true, force: true }));

  it('runs the agent to done, resumes the same session with its earlier turn, and destroys everything', async () => {
    writeManifests();
    const progress: string[] = [];
    // While the bottle runs, look at its agent container as the engine reports it.
    let seen: Awaited<ReturnType<typeof backend.list>> = [];
    let rawInspect = '';
    let holderMode = '';
    const roles = new Map<string, Set<string>>();
    // Its own containers only: other test files' (and pooled namespace holders) may be many.
    const slug = `implementer-${Math.random().toString(16).slice(2, 7)}`;
    const watching = setInterval(() => {
      backend.list({ 'bb.slug': slug }).then(
        (all) => {
          for (const c of all) {
            const slug = c.labels['bb.slug'] ?? '';
            if (!roles.has(slug)) roles.set(slug, new Set());
            roles.get(slug)!.add(c.labels['bb.role'] ?? '');
          }
        },
        () => {},
      );
      backend.list({ 'bb.slug': slug, 'bb.role': 'agent' }).then(
        async (now) => {
          if (now.length > seen.length) seen = now;
          // Only this test's bottle (other test files run agents at the same time).
          const mine = now.find((c) => c.labels['bb.slug']?.startsWith('implementer-'));
          if (!rawInspect && mine) {
            const raw = await new Docker().getContainer(mine.id).inspect();
            const mode = raw.HostConfig.NetworkMode ?? '';
            holderMode = mode.startsWith('container:')
              ? ((await new Docker().getContainer(mode.slice(10)).inspect()).HostConfig
                  .NetworkMode ?? '')
              : mode;
            rawInspect = JSON.stringify(raw);
          }
        },
        () => {},
      );
    }, 20);
    const first = await launch({
      agent: 'implementer',
      slug,
      prompt: 'please fix the export',
      forge: wiring(),
      backend,
      env: env(),
      onProgress: (msg) => progress.push(msg),
    }).finally(() => clearInterval(watching));
    expect(first.output).toContain('"type":"result"');
    expect(first, first.output).toMatchObject({ exitCode: 0, ok: true });
    expect(first.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(progress.join('\n')).toMatch(
      /creating the gate \(forge, supervise, egress, cred\)[\s\S]*fetching acme\/widgets[\s\S]*freezing/,
    );
    // The gate starts and the agent's container is made while the repository is cloned.
    expect(progress).toEqual(
      expect.arrayContaining(['starting the gate', 'running script agent (turn 1)']),
    );
    // A bottle is two containers: its agent and its gate (forge and supervise sidecars in one).
    expect([...(roles.get(first.slug) ?? [])].sort()).toEqual(['agent', 'gate']);
    // The forge saw the comment and the PR from the bot's branch.
    const issue = server.issue('acme/widgets', 1);
    expect(issue.comments.at(-1)!.body).toBe('Working on it: please fix the export');
    const pr = [...server.repos.get('acme/widgets')!.issues.values()].find((i) => i.pull)!;
    expect(pr.pull!.headRef).toBe('bb/implementer-1');
    expect(pr.author).toBe('bb-claude');
    // The agent ran hardened, with no network and no forge credentials in its environment.
    const agentSeen = seen.find((c) => c.labels['bb.slug'] === first.slug);
    expect(agentSeen, 'the running agent container was seen').toBeDefined();
    // No network: none of its own, or the empty namespace of a holder made with none.
    expect(holderMode).toBe('none');
    expect(rawInspect).not.toContain(TOKEN);
    expect(rawInspect).not.toMatch(/FORGE_TOKEN/);
    expect(agentSeen!.isolation).toMatchObject({
      network: 'none',
      capDrop: ['ALL'],
      noNewPrivileges: true,
      readOnlyRootfs: true,
      user: '1000:1000',
      pidsLimit: 128,
    });
    // Frozen: no container left, workspace, transcript and session kept; the done signal queued.
    expect(await backend.list({ 'bb.slug': first.slug })).toEqual([]);
    const meta = readMeta(first.slug, env())!;
    expect(meta).toMatchObject({
      status: 'frozen',
      sessionId: first.sessionId,
      cwd: '/workspace',
      branch: 'bb/implementer-1',
    });
    const dir = bottleDir(first.slug, env());
    await mountBottleDisk(first.slug, env());
    expect(readFileSync(join(bottlePaths(first.slug, env()).workspace, 'fix.txt'), 'utf8')).toBe(
      'fixed in turn 1\n',
    );
    const queue = readdirSync(join(dir, 'queue'))
      .filter((f) => f.endsWith('.json'))
      .map((f) => JSON.parse(readFileSync(join(dir, 'queue', f), 'utf8')));
    expect(queue.find((e) => e.type === 'done')?.data).toEqual({
      status: 'success',
      summary: 'Opened the PR.',
    });
    expect(queue.find((e) => e.type === 'op' && e.data.method === 'open_pr')?.data.prNumber).toBe(
      pr.number,
    );

    // Resume: the same session, and the agent sees its first turn.
    const second = await resume({
      slug: first.slug,
      prompt: 'add a test please',
      forgeToken: TOKEN,
      backend,
      env: env(),
      pr: pr.number,
    });
    expect(second).toMatchObject({ exitCode: 0, ok: true, sessionId: first.sessionId });
    // Nobody pushed to the PR branch since the agent did: nothing to bring over, no wait.
    expect(readMeta(first.slug, env())!.syncPr).toBe(false);
    expect(second.output).not.toContain('the PR branch');
    expect(server.issue('acme/widgets', 1).comments.at(-1)!.body).toBe(
      `Turn 2 (session ${first.sessionId}). Earlier prompts: please fix the export`,
    );
    await mountBottleDisk(first.slug, env());
    const transcript = readFileSync(
      join(bottlePaths(first.slug, env()).home, '.bb', 'transcript.jsonl'),
      'utf8',
    )
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(transcript.map((t: { prompt: string }) => t.prompt)).toEqual([
      'please fix the export',
      'add a test please',
    ]);
    expect(readMeta(first.slug, env())!.turns.map((t) => t.turn)).toEqual([1, 2]);

    // The token was never written anywhere in the bottle's state.
    const all = (d: string): string[] =>
      readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? e.name === '.git'
            ? []
            : all(join(d, e.name))
          : e.name === 'disk.img'
            ? []
            : [join(d, e.name)],
      );
    await mountBottleDisk(first.slug, env());
    for (const f of all(dir)) expect(readFileSync(f, 'utf8'), f).not.toContain(TOKEN);

    await destroy(first.slug, { backend, env: env() });
    expect(existsSync(dir)).toBe(false);
    expect(await backend.list({ 'bb.slug': first.slug })).toEqual([]);
  });

  it("propagates the agent's exit code and leaves the bottle frozen and resumable", async () => {
    writeManifests({ turns: [{ steps: [{ do: 'exit', code: 5 }] }, { steps: [] }] });
    const r = await launch({ agent: 'implementer', prompt: 'fail please', backend, env: env() });
    expect(r.exitCode).toBe(5);
    expect(r.ok).toBe(false);
    expect(readMeta(r.slug, env())!.status).toBe('frozen');
    const again = await resume({ slug: r.slug, prompt: 'now succeed', backend, env: env() });
    expect(again.exitCode).toBe(0);
    await destroy(r.slug, { backend, env: env() });
  });

  /** A real engine with faults put in: an agent's container that cannot be made, a slow gate. */
  const faulty = (o: { gateCreateMs?: number; netns?: string }) =>
    new (class extends DockerBackend {
      override async takeNetns() {
        return o.netns ?? super.takeNetns();
      }
      override async create(spec: Parameters<DockerBackend['create']>[0]) {
        if (spec.labels['bb.role'] === 'agent')
          throw new Error('the engine could not create the container (injected)');
        if (spec.labels['bb.role'] === 'gate' && o.gateCreateMs)
          await new Promise((r) => setTimeout(r, o.gateCreateMs));
        return super.create(spec);
      }
    })();

  it('a resume whose agent cannot be made leaves no gate running, and the bottle resumable', async () => {
    writeManifests({ turns: [{ steps: [{ do: 'done', status: 'success', summary: 'ok' }] }] });
    const first = await launch({
      agent: 'implementer',
      prompt: 'x',
      backend,
      env: env(),
      forge: wiring(),
    });
    expect(first.ok).toBe(true);
    const failed = await resume({
      slug: first.slug,
      prompt: 'again',
      forgeToken: TOKEN,
      backend: faulty({ gateCreateMs: 1500 }),
      env: env(),
    }).catch((e: Error) => e);
    expect(String(failed)).toMatch(/could not create the container \(injected\)/);
    // The gate, made after the agent failed, went with the freeze: nothing runs on.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await backend.list({ 'bb.slug': first.slug })).toEqual([]);
    expect(readMeta(first.slug, env())?.status).toBe('frozen');
    const again = await resume({
      slug: first.slug,
      prompt: 'again',
      forgeToken: TOKEN,
      backend,
      env: env(),
    });
    expect(again.ok).toBe(true);
    await destroy(first.slug, { backend, env: env() });
  });

  it('an agent container that cannot be made gives its network namespace holder back', async () => {
    writeManifests();
    const holder = await new Docker().createContainer({
      Image: BASE_IMAGE,
      Cmd: ['sleep', '120'],
      HostConfig: { NetworkMode: 'none', AutoRemove: true },
    });
    await holder.start();
    try {
      const err = await launch({
        agent: 'implementer',
        prompt: 'x',
        backend: faulty({ netns: holder.id }),
        env: env(),
        slug: 'implementer-nocreate',
      }).catch((e: Error) => e);
      expect(String(err)).toMatch(/could not create the container \(injected\)/);
      expect(await backend.inspect(holder.id)).toBeUndefined();
      expect(existsSync(bottleDir('implementer-nocreate', env()))).toBe(false);
    } finally {
      await holder.remove({ force: true }).catch(() => {});
    }
  });

  it.skipIf(!canMountDisks())(
    'a disk that cannot be mounted fails the launch, and the containers made meanwhile go with it',
    async () => {
      writeManifests();
      // A pooled image that is no filesystem: the launch takes it while its gate's and
      // its agent's containers are being created.
      const bytes = 32 * 1024 * 1024;
      const pool = join(home, 'disk-pool', String(bytes));
      mkdirSync(pool, { recursive: true });
      writeFileSync(join(pool, 'broken.img'), '');
      truncateSync(join(pool, 'broken.img'), bytes);
      const slug = 'implementer-nodisk';
      // An engine slow to create the agent's container: the disk has failed, and the
      // gate been made, well before it exists.
      const slow = new (class extends DockerBackend {
        override async create(spec: Parameters<DockerBackend['create']>[0]) {
          if (spec.labels['bb.role'] === 'agent') await new Promise((r) => setTimeout(r, 1500));
          return super.create(spec);
        }
      })();
      const err = await launch({
        agent: 'implementer',
        prompt: 'x',
        backend: slow,
        env: { ...env(), BB_BOTTLE_DISK: '32m', BB_DISK_POOL: '0' },
        slug,
        forge: wiring(),
      }).catch((e) => e);
      expect(String(err.message)).toMatch(/the bottle disk could not be mounted/);
      // Whatever was still being made when the launch failed has been by now.
      await new Promise((r) => setTimeout(r, 2000));
      expect(await backend.list({ 'bb.slug': slug })).toEqual([]);
      expect(existsSync(bottleDir(slug, env()))).toBe(false);
      expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(slug);
    },
  );

  it('refuses bad input clearly and leaves no half-created bottle', async () => {
    writeManifests();
    const code = (p: Promise<unknown>) =>
      p.then(
        () => 'resolved',
        (e) => `${e.code}: ${e.message}`,
      );
    expect(await code(launch({ agent: 'nobody', prompt: 'x', backend, env: env() }))).toMatch(
      /^NOT_FOUND: no agent named nobody: create .*agents\/nobody.json/,
    );
    expect(
      await code(
        launch({ agent: 'implementer', bottles: ['nothere'], prompt: 'x', backend, env: env() }),
      ),
    ).toMatch(/^NOT_FOUND: no bottle named nothere/);
    writeManifests(SCRIPT, 'bb-missing-image:never');
    /** Launch the implementer as `slug`. */
    const launchAs = (slug: string) =>
      launch({ agent: 'implementer', prompt: 'x', backend, env: env(), slug });
    expect(await code(launchAs('implementer-noimg'))).toMatch(
      /^NOT_FOUND: image bb-missing-image:never is not on this Docker engine/,
    );
    expect(existsSync(bottleDir('implementer-noimg', env()))).toBe(false);
    writeManifests({ turns: [{ steps: [] }] });
    const ok = await launchAs('implementer-taken');
    expect(await code(launchAs('implementer-taken'))).toMatch(
      /^CONFLICT: a bottle named implementer-taken already exists/,
    );
    expect(
      await code(resume({ slug: 'implementer-nope', prompt: 'x', backend, env: env() })),
    ).toMatch(/^NOT_FOUND: no bottle implementer-nope/);
    const meta = readMeta(ok.slug, env())!;
    writeFileSync(
      join(bottleDir(ok.slug, env()), 'meta.json'),
      JSON.stringify({ ...meta, status: 'running' }),
    );
    expect(await code(resume({ slug: ok.slug, prompt: 'x', backend, env: env() }))).toMatch(
      /^CONFLICT: bottle implementer-taken is running; only a frozen bottle can be resumed/,
    );
    // A forge bottle whose clone fails is cleaned up entirely.
    const bad = { ...wiring(), cloneUrl: `${server.url}/acme/nothing.git` };
    expect(
      await code(
        launch({
          agent: 'implementer',
          prompt: 'x',
          forge: bad,
          backend,
          env: env(),
          slug: 'implementer-noclone',
        }),
      ),
    ).toMatch(/^FORGE_UNAVAILABLE: cannot fetch/);
    expect(existsSync(bottleDir('implementer-noclone', env()))).toBe(false);
    expect(await backend.list({ 'bb.slug': 'implementer-noclone' })).toEqual([]);
    await destroy(ok.slug, { backend, env: env() });
  });
});
