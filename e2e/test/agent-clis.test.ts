// The real agent CLIs (Claude Code, Codex, pi from the bb-agents image) in
// bottles on a real Docker engine, driven by the scripted model API through the
// credential proxy. Each: targeted issue → bottle → the CLI reads the issue,
// commits with its shell tool, comments, opens the PR and signals done → frozen
// with a provenance record naming the CLI and its version → a human PR comment
// resumes the same session (the model sees the whole earlier conversation) → PR
// merged → destroyed. The model key never enters the bottle. A model API that
// fails with 500s ends the run promptly as a failure, and the bottle stays
// frozen and resumable.
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import {
  type BottleSpec,
  bottleDir,
  bottlePaths,
  DockerBackend,
  HOME_LABEL,
  homeLabel,
  mountBottleDisk,
  readMeta,
  resume,
  unmountBottleDisk,
} from '@bb/headless';
import { ProvenanceStore } from '@bb/provenance';
import {
  createScriptedModelServer,
  type ScriptedModelServer,
  type ScriptStep,
} from '@bb/scripted-model';
import type { RunningOrchestrator } from '@bb/service';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { probeDocker } from '@bb/tooling/docker';
import { importHead, runGit, wallGitEnv, withAlternates } from '@bb/wall';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileIssue, forgeWorld, probeAgentsImage, serveFor, until } from './support';

const docker = await probeDocker();
const { ok: hasImage, image: AGENTS_IMAGE } = await probeAgentsImage(docker.ok);

const TOKEN = 'bb-claude-token-clis-9090';
const SECRET = 'clis-webhook-secret';
const MODEL_KEY = 'sk-test-model-key-7f3a9c2e51d04b8a';
const OVERLAY = 'House rule: keep each commit to one change.';

type Cli = 'claude' | 'codex' | 'pi';
interface Tools {
  forge: (tool: string, input: Record<string, unknown>, bbForge: string) => ScriptStep['tools'];
  bash: (command: string) => NonNullable<ScriptStep['tools']>[number];
  route: '/anthropic' | '/openai';
  header: string;
}
const TOOLS: Record<Cli, Tools> = {
  claude: {
    forge: (tool, input) => [{ name: `mcp__forge__${tool}`, input }],
    bash: (command) => ({ name: 'Bash', input: { command, description: 'run it' } }),
    route: '/anthropic',
    header: 'x-api-key',
  },
  codex: {
    forge: (tool, input) => [{ name: tool, namespace: 'mcp__forge', input }],
    bash: (command) => ({ name: 'exec_command', input: { cmd: command } }),
    route: '/openai',
    header: 'authorization',
  },
  pi: {
    // pi has no MCP: the forge through bb-forge in its bash tool.
    forge: (_tool, _input, bbForge) => [
      { name: 'bash', input: { command: `$BB_FORGE ${bbForge}` } },
    ],
    bash: (command) => ({ name: 'bash', input: { command } }),
    route: '/anthropic',
    header: 'x-api-key',
  },
};

function scriptFor(cli: Cli, issue: number, pr: number): ScriptStep[] {
  const t = TOOLS[cli];
  const comment = (n: number, body: string) => ({
    tools: t.forge('post_comment', { number: n, body }, `comment ${n} '${body}'`),
  });
  const done = (summary: string) => ({
    tools: t.forge('signal_done', { status: 'success', summary }, `done success '${summary}'`),
  });
  return [
    { tools: t.forge('read_issue', { number: issue }, `read-issue ${issue}`) },
    {
      tools: [
        t.bash(
          `printf 'fixed by ${cli}\\n' > fix-${cli}.txt && git add fix-${cli}.txt && git commit -qm 'Fix the thing' && echo committed`,
        ),
      ],
    },
    comment(issue, `${cli}: working on it.`),
    {
      tools: t.forge(
        'open_pr',
        { title: 'Fix the thing', body: `Fixes #${issue}.` },
        `open-pr 'Fix the thing' 'Fixes #${issue}.'`,
      ),
    },
    done('Opened the PR.'),
    { say: 'The PR is open.' },
    // Turn two, after the human's comment.
    comment(pr, `${cli}: handled your comment.`),
    done('Answered.'),
    { say: 'Answered.' },
  ];
}

/** Every file under `dir` (skipping sockets), for the no-key-anywhere check. */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = statSync(p, { throwIfNoEntry: false });
    if (!st) continue;
    if (st.isDirectory()) out.push(...filesUnder(p));
    // The bottle's disk image is read through its mount instead.
    else if (st.isFile() && name !== 'disk.img') out.push(p);
  }
  return out;
}

/** The subject of a frozen bottle's last commit, its objects read as data by a repository of ours. */
async function lastCommitSubject(home: string, slug: string): Promise<string> {
  const env = { BB_HOME: home };
  await mountBottleDisk(slug, env);
  const into = mkdtempSync(join(tmpdir(), 'bb-read-'));
  try {
    // The checkout borrows the repository's history from its mirror: so does this reader.
    const meta = readMeta(slug, env);
    const sha = await importHead({
      workspace: bottlePaths(slug, env).workspace,
      into,
      alternates: meta?.mirror ? [join(meta.mirror, 'objects')] : [],
      exclude: meta?.baseCommit ? [meta.baseCommit] : [],
    });
    return (
      await runGit([`--git-dir=${into}`, 'log', '--format=%s', '-1', sha], {
        env: withAlternates(wallGitEnv(), meta?.mirror ? [join(meta.mirror, 'objects')] : []),
      })
    ).trim();
  } finally {
    await unmountBottleDisk(slug, env);
    rmSync(into, { recursive: true, force: true });
  }
}

describe.skipIf(!hasImage)('real agent CLIs in bottles against the scripted model API', () => {
  let home: string;
  let gitea: GiteaTestServer;
  let orch: RunningOrchestrator;
  const models: Partial<Record<Cli | 'failing' | 'failing-pi', ScriptedModelServer>> = {};
  // Docker, recording what each container was given: the agent's configuration
  // is checked for the key, not only its files.
  const specs: BottleSpec[] = [];
  const backend = new (class extends DockerBackend {
    override create(spec: BottleSpec): Promise<string> {
      specs.push(structuredClone(spec));
      return super.create(spec);
    }
  })();
  let db: BbDatabase;

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bb-clis-'));
    mkdirSync(join(home, 'config', 'agents'), { recursive: true });
    mkdirSync(join(home, 'config', 'bottles'), { recursive: true });
    for (const cli of ['claude', 'codex', 'pi', 'failing', 'failing-pi'] as const) {
      const provider = cli === 'failing' ? 'claude' : cli === 'failing-pi' ? 'pi' : cli;
      models[cli] = await createScriptedModelServer({ script: [{ say: 'not set yet' }] });
      writeFileSync(
        join(home, 'config', 'agents', `${cli}.json`),
        JSON.stringify({
          provider,
          model: 'scripted-model',
          retries: 0,
          bottles: [cli],
          promptOverlay: OVERLAY,
          git: { name: `${cli} agent`, email: `${cli}@example.test` },
        }),
      );
      const t = TOOLS[provider];
      writeFileSync(
        join(home, 'config', 'bottles', `${cli}.json`),
        JSON.stringify({
          image: AGENTS_IMAGE,
          credentials: [
            {
              route: t.route,
              upstream: models[cli]!.url,
              headers: {
                [t.header]:
                  t.header === 'authorization'
                    ? 'env:BB_TEST_MODEL_BEARER'
                    : 'env:BB_TEST_MODEL_KEY',
              },
            },
          ],
        }),
      );
    }
    gitea = await createGiteaTestServer({
      world: forgeWorld(TOKEN),
    });
    orch = await serveFor({
      home,
      gitea,
      token: TOKEN,
      secret: SECRET,
      backend,
      env: { BB_TEST_MODEL_KEY: MODEL_KEY, BB_TEST_MODEL_BEARER: `Bearer ${MODEL_KEY}` },
    });
    db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
  }, 60_000);

  afterAll(async () => {
    db?.close();
    await orch?.close();
    await gitea?.close();
    for (const m of Object.values(models)) await m?.close();
    for (const c of await backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) }))
      await backend.destroy(c.id);
    rmSync(home, { recursive: true, force: true });
  });

  const row = (n: number) => new SqliteForgeStateStore({ database: db }).get('acme', 'widgets', n);
  const chain = (slug: string) => new ProvenanceStore(db).chain(slug);
  /** Issue `n`'s row once its first turn is frozen and recorded. */
  const firstTurnRecorded = (n: number, what: string) =>
    until(
      what,
      () => {
        const r = row(n);
        return r?.status === 'frozen' && chain(r.slug).length === 1 ? r : undefined;
      },
      120_000,
    );
  const bodies = (n: number) => gitea.issue('acme/widgets', n).comments.map((c) => c.body);

  it.each(['claude', 'codex', 'pi'] as const)(
    '%s: issue → PR → frozen → resumed with the same session → merged → destroyed',
    async (cli) => {
      const model = models[cli]!;
      // Issues and PRs share numbers: the PR is the next one.
      const n = fileIssue(gitea, cli, `Fix the thing (${cli})`, 'It is broken.');
      model.setScript(scriptFor(cli, n, n + 1));
      const frozen = await until(
        `the ${cli} turn to end frozen with a PR`,
        () => {
          const r = row(n);
          return r?.status === 'frozen' && r.prNumber ? r : undefined;
        },
        120_000,
      );
      expect(frozen.prNumber).toBe(n + 1);
      expect(gitea.issue('acme/widgets', n + 1).pull?.headRef).toBe(`bb/${cli}-${n}`);
      expect(bodies(n)).toContain(`${cli}: working on it.`);
      const [first] = chain(frozen.slug);
      expect(first!.record).toMatchObject({
        provider: cli,
        providerVersion: expect.stringMatching(/^\d+\.\d+\.\d+/),
        done: { status: 'success', summary: 'Opened the PR.' },
        watchdogFired: null,
        exitCode: 0,
      });
      expect(frozen.sessionId).toBeTruthy();
      // The shell tool really ran git in the workspace (read as data, as the host reads it).
      expect(await lastCommitSubject(home, frozen.slug)).toBe('Fix the thing');

      const turnOneRequests = model.requests.length;
      gitea.comment('alice', 'acme/widgets', n + 1, 'Please also handle empty widgets.');
      await until(
        `the resumed ${cli} turn to be recorded`,
        () => (chain(frozen.slug).length === 2 ? true : undefined),
        120_000,
      );
      expect(bodies(n + 1)).toContain(`${cli}: handled your comment.`);
      expect(row(n)?.sessionId).toBe(frozen.sessionId);
      // The resumed request carries the whole earlier conversation.
      const resumed = model.requests.slice(turnOneRequests).find((r) => r.step === 6)!;
      expect(resumed).toBeDefined();
      const history = JSON.stringify(resumed.body);
      expect(history).toContain('Please also handle empty widgets.');
      expect(history).toContain('Fix the thing');
      expect(history).toContain(`${cli}: working on it.`);
      // The manifest's overlay reached the model on both turns: after the issue, and after the reply.
      const opening = JSON.stringify(model.requests[0]!.body);
      expect(opening.indexOf(OVERLAY)).toBeGreaterThan(opening.indexOf('It is broken.'));
      expect(
        history.indexOf(OVERLAY, history.indexOf('Please also handle empty widgets.')),
      ).toBeGreaterThan(0);

      // The key reached the model API (added by the proxy) and nothing in the bottle.
      const auth = model.requests.map((r) => r.headers[TOOLS[cli].header]);
      expect(auth.every((v) => v?.includes(MODEL_KEY))).toBe(true);
      const dir = bottleDir(frozen.slug, { BB_HOME: home });
      await mountBottleDisk(frozen.slug, { BB_HOME: home });
      for (const f of filesUnder(dir))
        if (!f.includes(`${join(dir, 'proxy')}`))
          expect(readFileSync(f, 'utf8'), f).not.toContain(MODEL_KEY);
      await unmountBottleDisk(frozen.slug, { BB_HOME: home });
      expect(JSON.stringify(chain(frozen.slug))).not.toContain(MODEL_KEY);
      const mine = specs.filter((c) => c.labels['bb.slug'] === frozen.slug);
      const agents = mine.filter((c) => c.labels['bb.role'] === 'agent');
      // One agent container for both turns: the second ran in the bottle kept warm.
      expect(agents).toHaveLength(1);
      for (const a of agents) {
        expect(JSON.stringify(a)).not.toContain(MODEL_KEY);
        expect(JSON.stringify(a)).not.toContain(TOKEN);
        expect(a.network).toBe('none');
      }
      // No container's configuration holds it: the gate reads it from a file it alone mounts.
      expect(mine.filter((c) => JSON.stringify(c).includes(MODEL_KEY))).toEqual([]);
      // One gate, kept warm with it, serving the proxies beside the sidecar.
      const gates = mine.filter((c) => c.labels['bb.role'] === 'gate');
      expect(gates).toHaveLength(1);
      for (const g of gates) expect(g.env?.['BB_CRED_SOCKET']).toBeDefined();
      expect(JSON.stringify(chain(frozen.slug))).not.toContain(TOKEN);

      await gitea.mergePr('alice', 'acme/widgets', n + 1);
      await until(`the ${cli} bottle to be destroyed`, () =>
        row(n)?.status === 'destroyed' ? true : undefined,
      );
      expect(await backend.list({ 'bb.slug': frozen.slug })).toEqual([]);
    },
    300_000,
  );

  it('a model API failing with 500s ends the run promptly as a failure; the bottle stays frozen and resumable', async () => {
    const model = models.failing!;
    model.setScript([{ fail: 500 }]);
    const n = fileIssue(gitea, 'failing', 'Doomed', 'The model is down.');
    const frozen = await firstTurnRecorded(n, 'the failed turn to be recorded');
    const [rec] = chain(frozen.slug);
    expect(rec!.record.exitCode).not.toBe(0);
    expect(rec!.record.done).toBeNull();
    expect(rec!.record.watchdogFired?.reason).toBe('exit_without_signal');
    // Promptly: one request, no retries (the agent's `retries: 0`), then the turn ends.
    expect(model.requests.filter((r) => r.status === 500)).toHaveLength(1);
    expect(readMeta(frozen.slug, { BB_HOME: home })?.status).toBe('frozen');

    // The model is back: the same bottle resumes.
    model.setScript([
      {
        tools: [
          { name: 'mcp__forge__signal_done', input: { status: 'success', summary: 'Recovered.' } },
        ],
      },
      { say: 'Recovered.' },
    ]);
    const out = await resume({
      slug: frozen.slug,
      prompt: 'The model API is back; carry on.',
      forgeToken: TOKEN,
      backend,
      env: { BB_HOME: home, BB_TEST_MODEL_KEY: MODEL_KEY },
    });
    expect(out.exitCode).toBe(0);
    expect(out.ok).toBe(true);
  }, 180_000);

  it('pi exits 0 when the model API fails; the run is still recorded as a failure', async () => {
    const model = models['failing-pi']!;
    model.setScript([{ fail: 500 }]);
    const n = fileIssue(gitea, 'failing-pi', 'Doomed too', 'The model is down for pi.');
    const frozen = await firstTurnRecorded(n, 'the failed pi turn to be recorded');
    const meta = readMeta(frozen.slug, { BB_HOME: home });
    // pi itself exited 0 ...
    expect(meta?.turns[0]).toMatchObject({ exitCode: 0, ok: false });
    // ... and the record says the run failed: no done signal, the watchdog's reason.
    const [rec] = chain(frozen.slug);
    expect(rec!.record).toMatchObject({
      provider: 'pi',
      done: null,
      exitCode: 0,
      agentError: 'the model API failed (pi reported an error while exiting 0)',
    });
    expect(rec!.record.watchdogFired?.reason).toBe('exit_without_signal');
    expect(model.requests.every((r) => r.status === 500)).toBe(true);
  }, 180_000);
});
