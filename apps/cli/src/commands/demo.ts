import { randomBytes } from 'node:crypto';
import {
  createWriteStream,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbError, errorMessage } from '@bb/errors';
import {
  type Backend,
  DockerBackend,
  HOME_LABEL,
  homeLabel,
  LOCAL_BACKEND_WARNING,
  LocalBackend,
} from '@bb/headless';
import { homeLayout } from '@bb/names';
import {
  loadOrCreateSigningKey,
  ProvenanceStore,
  renderTerminal,
  renderVerification,
  verifyChain,
} from '@bb/provenance';
import {
  createScriptedModelServer,
  type ScriptedModelServer,
  type ScriptStep,
} from '@bb/scripted-model';
import { type RunningOrchestrator, serve } from '@bb/service';
import { BbDatabase, type ForgeState, SqliteForgeStateStore } from '@bb/state';
import { bold, type CliIo, dim, green, parse, yellow } from '../io';
import { DEMO_USAGE } from '../usage';
import { type DemoForge, demoForge } from './demo-forge';

const BOT = 'bb-bot';
const BOT_TOKEN = 'bb-demo-bot-token-0123456789';
const SECRET = 'bb-demo-webhook-secret';
const REPO = 'acme/widgets';

const DEMO_AGENT = {
  provider: 'script',
  git: { name: 'bot-bottle demo agent', email: 'demo-agent@bot-bottle.invalid' },
  script: {
    turns: [
      {
        steps: [
          { do: 'read_issue' },
          { do: 'comment', body: "Hello! I'm the demo agent, working on #{{issue}} in a bottle." },
          {
            do: 'write',
            path: 'GREETING.md',
            content: '# Greetings\n\nHello from a bot-bottle agent.\n',
          },
          { do: 'commit', message: 'Add a greeting (#{{issue}})' },
          { do: 'open_pr', title: 'Add a greeting', body: 'Fixes #{{issue}}.' },
          { do: 'done', status: 'success', summary: 'Added GREETING.md and opened a PR.' },
        ],
      },
      {
        steps: [
          {
            do: 'comment',
            body: 'Turn {{turn}} of session {{session}}: you asked "{{prompt}}" — noted, no change needed.',
          },
          { do: 'done', status: 'success', summary: 'Answered the review comment.' },
        ],
      },
    ],
  },
};

/** What the scripted model tells Claude Code to do, turn by turn. */
function claudeScript(issue: number, pr: number): ScriptStep[] {
  const forge = (tool: string, input: Record<string, unknown>): ScriptStep => ({
    tools: [{ name: `mcp__forge__${tool}`, input }],
  });
  return [
    forge('read_issue', { number: issue }),
    {
      say: 'I will add the greeting.',
      tools: [
        {
          name: 'Bash',
          input: {
            command: `printf '# Greetings\\n\\nHello from Claude Code in a bottle.\\n' > GREETING.md && git add GREETING.md && git commit -qm 'Add a greeting (#${issue})'`,
            description: 'write and commit GREETING.md',
          },
        },
      ],
    },
    forge('post_comment', {
      number: issue,
      body: `Hello! I'm Claude Code, working on #${issue} in a bottle.`,
    }),
    forge('open_pr', { title: 'Add a greeting', body: `Fixes #${issue}.` }),
    forge('signal_done', { status: 'success', summary: 'Added GREETING.md and opened a PR.' }),
    { say: 'The PR is open.' },
    forge('post_comment', {
      number: pr,
      body: 'Warmer it is: noted for the next revision. Thanks!',
    }),
    forge('signal_done', { status: 'success', summary: 'Answered the review comment.' }),
    { say: 'Answered.' },
  ];
}

/** The last lines of the orchestrator's JSON log, one readable line each. */
function orchestratorTail(path: string, lines = 15): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return '';
  }
  if (text.trim() === '') return '';
  const shown = text
    .trimEnd()
    .split('\n')
    .slice(-lines)
    .map((line) => {
      try {
        const {
          level: _l,
          time,
          name: _n,
          msg,
          ...rest
        } = JSON.parse(line) as Record<string, unknown>;
        const extra = Object.keys(rest).length > 0 ? ` ${JSON.stringify(rest)}` : '';
        return `   ${new Date(Number(time)).toISOString().slice(11, 23)} ${String(msg)}${extra}`;
      } catch {
        return `   ${line}`;
      }
    });
  return `the orchestrator's last ${shown.length} log lines:\n${shown.join('\n')}\n`;
}

async function until<T>(what: string, fn: () => T | undefined, ms = 90_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > end) throw new BbError('TIMEOUT', `the demo timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Docker when an engine answers and has the base image; otherwise why not. */
async function pickBackend(
  wanted: string | undefined,
  image: string,
): Promise<{ backend: Backend; note?: string }> {
  if (wanted === 'local') return { backend: new LocalBackend({ warn: () => {} }) };
  const docker = new DockerBackend();
  try {
    await docker.list({ 'bb.demo': 'probe' });
  } catch (err) {
    if (wanted === 'docker') throw err;
    return {
      backend: new LocalBackend({ warn: () => {} }),
      note: `no Docker engine answers (${errorMessage(err)}); start one with: sh scripts/ensure-docker.sh`,
    };
  }
  try {
    await docker.ensureImage(image);
  } catch (err) {
    if (wanted === 'docker') throw err;
    return {
      backend: new LocalBackend({ warn: () => {} }),
      note: `the bottle image ${image} is missing; build it with: sh scripts/build-base-image.sh`,
    };
  }
  return { backend: docker };
}

export async function demoCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parse(
    argv,
    {
      keep: { type: 'boolean' },
      backend: { type: 'string' },
      agent: { type: 'string' },
      forge: { type: 'string' },
    },
    DEMO_USAGE,
  );
  const wanted = values['backend'] as string | undefined;
  if (wanted !== undefined && wanted !== 'docker' && wanted !== 'local')
    throw new BbError(
      'INVALID_INPUT',
      `--backend must be docker or local (got ${JSON.stringify(wanted)})`,
    );
  const forgeKind = (values['forge'] as string | undefined) ?? 'gitea';
  if (forgeKind !== 'gitea' && forgeKind !== 'github')
    throw new BbError(
      'INVALID_INPUT',
      `--forge must be gitea or github (got ${JSON.stringify(forgeKind)})`,
    );
  const t0 = Date.now();
  const say = (text: string) => io.stdout(`${text}\n`);
  const step = (n: number, text: string) =>
    say(
      `\n${bold(io, `${n}.`)} ${text} ${dim(io, `(${((Date.now() - t0) / 1000).toFixed(1)} s)`)}`,
    );
  const detail = (text: string) => say(`   ${text}`);

  const agentKind = (values['agent'] as string | undefined) ?? 'script';
  if (agentKind !== 'script' && agentKind !== 'claude')
    throw new BbError(
      'INVALID_INPUT',
      `--agent must be script or claude (got ${JSON.stringify(agentKind)})`,
    );
  if (agentKind === 'claude' && wanted === 'local')
    throw new BbError(
      'INVALID_INPUT',
      '--agent claude runs in the bb-agents image: it needs --backend docker',
    );
  const image = io.env['BB_BASE_IMAGE'] ?? 'bb-base:latest';
  const agentsImage = io.env['BB_AGENTS_IMAGE'] ?? 'bb-agents:latest';
  const modelKey = `sk-demo-${randomBytes(12).toString('hex')}`;
  let model: ScriptedModelServer | undefined;
  const home = mkdtempSync(join(tmpdir(), 'bb-demo-'));
  const env = { ...io.env, BB_HOME: home, BB_BASE_IMAGE: image };
  let gitea: DemoForge | undefined;
  let orch: RunningOrchestrator | undefined;
  let backend: Backend | undefined;
  try {
    say(bold(io, 'bot-bottle demo: a forge drives an AI coding agent in a bottle'));
    const picked = await pickBackend(agentKind === 'claude' ? 'docker' : wanted, image);
    if (agentKind === 'claude') {
      try {
        await picked.backend.ensureImage(agentsImage);
      } catch {
        throw new BbError(
          'NOT_FOUND',
          `--agent claude needs the ${agentsImage} image: build it with sh scripts/build-agents-image.sh (it installs the CLIs from the npm registry once)`,
        );
      }
    }
    backend = picked.backend;
    if (picked.note) say(yellow(io, `   note: ${picked.note}`));
    if (!backend.isolates) say(yellow(io, `   ${LOCAL_BACKEND_WARNING.replace(/^\[bb\] /, '')}`));
    detail(`state: ${home} (a temporary BB_HOME, removed afterwards)`);
    detail(
      `bottles: ${backend.name}${backend.name === 'docker' ? ` (image ${agentKind === 'claude' ? agentsImage : image}, agent without network)` : ''}`,
    );

    mkdirSync(homeLayout({}, home).agents, { recursive: true });
    mkdirSync(homeLayout({}, home).bottleManifests, { recursive: true });
    writeFileSync(
      join(homeLayout({}, home).bottleManifests, 'default.json'),
      JSON.stringify({ image }),
    );
    if (agentKind === 'claude') {
      model = await createScriptedModelServer({ script: [{ say: 'waiting for the issue' }] });
      writeFileSync(
        join(homeLayout({}, home).agents, 'demo.json'),
        JSON.stringify({
          provider: 'claude',
          model: 'scripted-model',
          retries: 0,
          bottles: ['claude'],
          git: DEMO_AGENT.git,
        }),
      );
      writeFileSync(
        join(homeLayout({}, home).bottleManifests, 'claude.json'),
        JSON.stringify({
          image: agentsImage,
          credentials: [
            {
              route: '/anthropic',
              upstream: model.url,
              headers: { 'x-api-key': 'env:BB_DEMO_MODEL_KEY' },
            },
          ],
        }),
      );
    } else {
      writeFileSync(
        join(homeLayout({}, home).agents, 'demo.json'),
        JSON.stringify(DEMO_AGENT, null, 2),
      );
    }

    gitea = await demoForge(forgeKind, {
      users: [
        { login: 'alice', tokens: ['alice-demo-token-0123456789'] },
        { login: BOT, tokens: [BOT_TOKEN] },
      ],
      orgs: [
        { name: 'acme', members: ['alice'] },
        { name: 'bot-bottle', members: [BOT] },
      ],
      repos: [
        {
          owner: 'acme',
          name: 'widgets',
          // alice writes to it (GitHub gives an org's members read access by default).
          collaborators: [BOT, 'alice'],
          // As docs/gitea-setup.md asks: an admin may read who else may write.
          admins: [BOT],
          files: { 'README.md': '# widgets\n\nA demo repository.\n' },
        },
      ],
    });
    orch = await serve({
      env: {
        ...env,
        BB_PORT: '0',
        ...gitea.env,
        FORGE_TOKEN: BOT_TOKEN,
        FORGE_WEBHOOK_SECRET: SECRET,
        BB_SWEEP_INTERVAL: '0',
        BB_DEMO_MODEL_KEY: modelKey,
      },
      backend,
      botLogin: BOT,
      logStream: createWriteStream(join(home, 'orchestrator.log')),
    });
    gitea.addHook(`${orch.url}/webhooks/${forgeKind}`, SECRET);
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    const store = new SqliteForgeStateStore({ database: db });
    const prov = new ProvenanceStore(db);
    const row = (n: number): ForgeState | undefined => store.get('acme', 'widgets', n);
    const comments = (n: number) => gitea!.issue(REPO, n).comments;

    step(1, `A ${gitea.title}-compatible server and the orchestrator are up.`);
    detail(`forge: ${gitea.apiUrl} (org bot-bottle with bot user ${BOT}; repo ${REPO})`);
    detail(
      `orchestrator: ${orch.url} (webhook ${orch.url}/webhooks/${forgeKind}, dashboard ${orch.url}/)`,
    );

    // A fresh forge: the issue is #1 and the agent's PR will be #2.
    model?.setScript(claudeScript(1, 2));
    const issue = gitea.createIssue('alice', REPO, {
      title: 'Greet our users',
      body: 'Please add a GREETING.md with a friendly hello.',
      labels: ['bot-bottle:demo'],
      assignees: [BOT],
    });
    step(
      2,
      `alice files issue #${issue} "Greet our users", labelled bot-bottle:demo, assigned to ${BOT}.`,
    );
    detail(
      `${gitea.title} sends the signed webhook; the orchestrator checks the targeting and launches a bottle.`,
    );
    const running = await until('the bottle to launch', () => row(issue));
    detail(
      `bottle ${bold(io, running.slug)} launched; its forge sidecar holds the token, the agent never sees it.`,
    );

    const frozen = await until('the agent to open a PR and signal done', () => {
      const r = row(issue);
      return r?.status === 'frozen' && r.prNumber ? r : undefined;
    });
    const pr = frozen.prNumber!;
    step(3, `The agent worked through its sidecar and signalled done; the bottle is frozen.`);
    for (const c of comments(issue)) detail(`comment on #${issue} by ${c.author}: ${c.body}`);
    detail(
      `PR #${pr}: "${gitea.issue(REPO, pr).title}" from branch ${gitea.issue(REPO, pr).pull?.headRef}`,
    );
    detail(`session ${frozen.sessionId ?? '(none)'} recorded for later turns`);
    if (model) {
      const first = prov.chain(frozen.slug)[0]?.record;
      detail(
        `the agent was the real ${first?.provider ?? 'claude'} CLI ${first?.providerVersion ?? ''}; ${model.requests.length} model requests reached the scripted model API at ${model.url}, each with the key the credential proxy added`,
      );
      detail(
        `model key inside the bottle: ${
          model.requests.every((r) => r.headers['x-api-key'] === modelKey)
            ? 'no (only the proxy held it)'
            : 'UNEXPECTED'
        }`,
      );
    }

    gitea.comment('alice', REPO, pr, 'Could you make it a little warmer?');
    step(4, `alice comments on PR #${pr}: "Could you make it a little warmer?"`);
    detail('The comment rehydrates the frozen bottle and resumes the same conversation.');
    await until('the resumed turn to be recorded', () =>
      prov.chain(frozen.slug).length >= 2 && row(issue)?.status === 'frozen' ? true : undefined,
    );
    const answer = [...comments(issue), ...comments(pr)]
      .filter((c) => c.author === BOT)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id - b.id)
      .at(-1);
    detail(`the agent answered: ${answer?.body ?? '(no answer)'}`);
    detail(`same session: ${row(issue)?.sessionId === frozen.sessionId ? green(io, 'yes') : 'NO'}`);

    await gitea.mergePr('alice', REPO, pr);
    step(5, `alice merges PR #${pr}; the orchestrator destroys the bottle.`);
    await until('the bottle to be destroyed', () =>
      row(issue)?.status === 'destroyed' ? true : undefined,
    );
    const left = await backend.list({ [HOME_LABEL]: homeLabel(env) });
    detail(`bottle ${frozen.slug}: destroyed; containers left: ${left.length}`);

    const chain = prov.chain(frozen.slug);
    const key = loadOrCreateSigningKey(home);
    step(
      6,
      `Provenance: ${chain.length} signed records, one per turn (also at ${orch.url}/api/runs).`,
    );
    say(
      renderTerminal(chain.at(-1)!)
        .trimEnd()
        .split('\n')
        .map((l) => `   ${l}`)
        .join('\n'),
    );
    const v = verifyChain(chain, key.publicKey);
    detail(
      renderVerification(v, `verification of ${frozen.slug}'s chain (key ${key.keyId})`).trimEnd(),
    );
    db.close();
    if (!v.ok) throw new BbError('INTERNAL', 'the provenance chain did not verify');

    say(`\n${green(io, 'Done')} in ${((Date.now() - t0) / 1000).toFixed(1)} s.`);
    if (values['keep']) {
      say(`\nThe servers stay up until Ctrl-C:`);
      detail(`dashboard:   ${orch.url}/`);
      detail(`bottles:     ${orch.url}/api/bottles`);
      detail(`runs:        ${orch.url}/api/runs`);
      detail(`forge API:   ${gitea.apiUrl}/repos/${REPO}/issues?state=all`);
      detail(`git:         ${gitea.cloneUrl(REPO)}`);
      detail(`state:       ${home}`);
      await (io.interrupted ?? new Promise<void>(() => {}));
    }
    return 0;
  } catch (err) {
    // The temporary BB_HOME goes away below, so what the orchestrator saw is shown now.
    io.stderr(orchestratorTail(join(home, 'orchestrator.log')));
    throw err;
  } finally {
    await orch?.close().catch(() => {});
    await model?.close().catch(() => {});
    await gitea?.close().catch(() => {});
    if (backend)
      for (const c of await backend.list({ [HOME_LABEL]: homeLabel(env) }).catch(() => []))
        await backend.destroy(c.id).catch(() => {});
    rmSync(home, { recursive: true, force: true });
  }
}
