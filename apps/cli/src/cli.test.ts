import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend } from '@bb/headless';
import {
  buildRunRecord,
  loadOrCreateSigningKey,
  ProvenanceStore,
  type SecretScanner,
  signRecord,
} from '@bb/provenance';
import { BbDatabase, SqliteForgeStateStore, SqliteLeaseStore } from '@bb/state';
import { sampleState } from '@bb/state/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT, runCli } from './cli';
import { doctorCommand, runDoctor } from './commands/doctor';
import { captureIo as io } from './test-io';

const noScan: SecretScanner = {
  scanCommits: async () => ({ tool: 'none', scanned: 'not scanned', findings: [] }),
};

describe('bb: help and usage', () => {
  it('--help lists every command, and each command has its own --help', async () => {
    const t = io();
    expect(await runCli(['--help'], t.io)).toBe(EXIT.OK);
    const commands = [
      'demo',
      'start',
      'resume',
      'orchestrate',
      'provenance',
      'destroy',
      'gc',
      'forge',
      'doctor',
    ];
    for (const c of commands) expect(t.out).toMatch(new RegExp(`^  ${c} `, 'm'));
    for (const c of commands) {
      const h = io();
      expect(await runCli([c, '--help'], h.io)).toBe(EXIT.OK);
      expect(h.out).toMatch(new RegExp(`^Usage: bb ${c}`));
      const viaHelp = io();
      expect(await runCli(['help', c], viaHelp.io)).toBe(EXIT.OK);
      expect(viaHelp.out).toBe(h.out);
    }
  });

  it.each([
    [['launch-rockets'], /unknown command "launch-rockets"/, /Usage: bb <command>/],
    [['--frobnicate'], /unknown option "--frobnicate"/, /Usage: bb <command>/],
    [['start'], /name the agent to start/, /Usage: bb start/],
    [['start', 'demo', 'more'], /unexpected argument "more"/, /Usage: bb start/],
    [['gc', 'now'], /unexpected argument "now"/, /Usage: bb gc/],
    [['start', 'demo', '--prompt', 'hi'], /add --headless/, /Usage: bb start/],
    [['start', 'demo', '--headless'], /--prompt is required/, /Usage: bb start/],
    [
      ['start', 'demo', '--headless', '--prompt', 'x', '--backend', 'k8s'],
      /--backend must be one of docker, local \(got "k8s"\)/,
      /Usage: bb start/,
    ],
    [
      ['start', 'demo', '--headless', '--prompt', 'x', '--colour'],
      /Unknown option '--colour'/,
      /Usage: bb start/,
    ],
    [['resume', 'demo-abcde', '--headless'], /--prompt is required/, /Usage: bb resume/],
    [['orchestrate'], /name a subcommand: start, resume, status or serve/, /Usage: bb orchestrate/],
    [['orchestrate', 'launch'], /unknown subcommand "launch"/, /Usage: bb orchestrate/],
    [
      ['orchestrate', 'resume', '--slug', 's'],
      /--prompt is required/,
      /Usage: bb orchestrate resume/,
    ],
    [
      ['orchestrate', 'status', '--yaml'],
      /Unknown option '--yaml'/,
      /Usage: bb orchestrate status/,
    ],
    [
      ['orchestrate', 'start', '--agent', 'a', '--prompt', 'p', '--container-label', 'bb.slug=x'],
      /--container-label must be KEY=VALUE/,
      /Usage: bb orchestrate start/,
    ],
    [
      ['orchestrate', 'start', '--agent', 'a', '--prompt', 'p', '--label', 'a,b'],
      /--label must be a forge label name such as bot-bottle:a/,
      /Usage: bb orchestrate start/,
    ],
    [['provenance'], /name a subcommand: show or verify/, /Usage: bb provenance/],
    [['provenance', 'show'], /name the run or bottle to show/, /Usage: bb provenance/],
    [
      ['provenance', 'show', 'x', '--json', '--md'],
      /choose one of --json and --md/,
      /Usage: bb provenance/,
    ],
    [['help', 'nope'], /no command "nope"/, /Usage: bb <command>/],
  ])('%j is a usage error: exit 2 with the message and the usage', async (argv, message, usage) => {
    const t = io();
    expect(await runCli(argv, t.io)).toBe(EXIT.USAGE);
    expect(t.err).toMatch(message);
    expect(t.err).toMatch(usage);
    expect(t.out).toBe('');
  });

  it('--version prints the package version', async () => {
    const t = io();
    expect(await runCli(['-v'], t.io)).toBe(EXIT.OK);
    expect(t.out).toMatch(/^\d+\.\d+\.\d+\n$/);
  });

  it('orchestrate start names each missing forge variable and creates nothing', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-cli-'));
    try {
      const t = io({ BB_HOME: home });
      const code = await runCli(['orchestrate', 'start', '--agent', 'a', '--prompt', 'p'], t.io, {
        backend: () => new DockerBackend(),
      });
      expect(code).toBe(EXIT.USAGE);
      expect(t.err).toMatch(/FORGE_GITEA_API is required: the Gitea API URL/);
      const n = io({
        BB_HOME: home,
        FORGE_GITEA_API: 'http://g/api/v1',
        FORGE_TOKEN: 'tok-123456789',
        FORGE_OWNER: 'acme',
        FORGE_REPO: 'w',
        FORGE_ISSUE_NUMBER: 'seven',
      });
      expect(await runCli(['orchestrate', 'start', '--agent', 'a', '--prompt', 'p'], n.io)).toBe(
        EXIT.USAGE,
      );
      expect(n.err).toMatch(/FORGE_ISSUE_NUMBER must be a positive whole number \(got "seven"\)/);
      expect(n.err).not.toContain('tok-123456789');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('bb orchestrate status and bb provenance', () => {
  let home: string;
  let recordId: string;
  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bb-cli-'));
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    const store = new SqliteForgeStateStore({ database: db });
    store.upsert(sampleState(17, { slug: 'implementer-k3x9q', prNumber: 18, status: 'frozen' }));
    // A comment waiting behind a turn.
    const waiting = store.accept('gitea:acme/widgets:comment#301:created', {
      issue: 'acme/widgets#17',
      occurredAt: '2026-11-22T10:02:00.000Z',
      payload: { kind: 'comment_created' },
    })!;
    store.settle(waiting.id, 'deferred');
    // Two orchestrators share this state: each holds an issue; a sweep lease is no issue.
    const leases = new SqliteLeaseStore(db);
    leases.claim('issue:acme/widgets#17', 'bb-2', 60_000);
    leases.claim('issue:acme/widgets#20', 'bb-1', 60_000);
    leases.claim('task:sweep', 'bb-1', 60_000);
    // What the orchestrator told an issue that could not launch.
    store.accept('bb:feedback:acme/widgets#19:0123456789abcdef', {
      issue: null,
      occurredAt: '2026-11-22T10:03:00.000Z',
      payload: { issue: 'acme/widgets#19', message: 'bot-bottle could not start agent nosuch' },
      done: true,
    });
    const key = loadOrCreateSigningKey(home);
    const prov = new ProvenanceStore(db);
    // The second turn's model answers, as its credential proxy metered them.
    const metered = join(home, 'metered');
    mkdirSync(join(metered, 'state'), { recursive: true });
    writeFileSync(
      join(metered, 'state', 'egress.jsonl'),
      `${JSON.stringify({ time: '2026-11-22T10:00:30.000Z', kind: 'credential', host: 'api.anthropic.com', port: 443, decision: 'allowed', rule: '/anthropic', route: '/anthropic', method: 'POST', status: 200, usage: { model: 'claude-sonnet-4-5-20250929', input: 1000, output: 100, cacheRead: 0, cacheWrite: 0, reported: true }, bytesUp: 1, bytesDown: 1, durationMs: 1 })}\n`,
    );
    for (const turn of [1, 2]) {
      const record = await buildRunRecord({
        stateDir: turn === 2 ? metered : join(home, 'nowhere'),
        slug: 'implementer-k3x9q',
        agent: 'implementer',
        bottles: ['default'],
        forge: { owner: 'acme', repo: 'widgets', issue: 17, prs: [18] },
        turn,
        startedAt: '2026-11-22T10:00:00.000Z',
        finishedAt: '2026-11-22T10:01:00.000Z',
        exitCode: 0,
        done: { status: 'success', summary: `turn ${turn} done` },
        watchdogFired: null,
        prev: prov.head('implementer-k3x9q'),
        scanner: noScan,
        bbVersion: '1.0.0',
        gitCommit: null,
      });
      prov.append(signRecord(record, key));
      recordId = record.id;
    }
    db.close();
  });
  afterAll(() => rmSync(home, { recursive: true, force: true }));

  it('status prints a table, and --json the documented shape with URLs', async () => {
    const t = io({ BB_HOME: home, FORGE_GITEA_API: 'https://gitea.example/api/v1' });
    expect(await runCli(['orchestrate', 'status'], t.io)).toBe(0);
    expect(t.out).toMatch(/^BOTTLE +STATUS +AGENT +ISSUE +PR +LAST CHECK-IN +COST$/m);
    expect(t.out).toMatch(/implementer-k3x9q {2}frozen .* \$0\.00$/m);
    expect(t.out).toMatch(
      /^today \(UTC\): 0 turns, 0 tokens, about \$0\.00 \(bb usage for more\)$/m,
    );
    expect(t.out).toContain('implementer-k3x9q  frozen');
    const j = io({ BB_HOME: home, FORGE_GITEA_API: 'https://gitea.example/api/v1' });
    expect(await runCli(['orchestrate', 'status', '--json'], j.io)).toBe(0);
    expect(JSON.parse(j.out)).toEqual({
      bottles: [
        {
          slug: 'implementer-k3x9q',
          agent: 'implementer',
          status: 'frozen',
          repo: 'acme/widgets',
          issue: 17,
          issueUrl: 'https://gitea.example/acme/widgets/issues/17',
          pr: 18,
          prUrl: 'https://gitea.example/acme/widgets/pulls/18',
          lastCheckinAt: expect.any(String),
          sessionId: expect.toSatisfy((v: unknown) => v === null || typeof v === 'string'),
          awaitingOperator: false,
          usage: { turns: 2, tokens: 1100, costUsd: 0.0045 },
        },
      ],
      today: { turns: 0, tokens: 0, costUsd: 0 },
      supervise: [],
      waiting: [
        {
          key: 'gitea:acme/widgets:comment#301:created',
          issue: 'acme/widgets#17',
          kind: 'comment_created',
          state: 'deferred',
          since: expect.any(String),
        },
      ],
      notices: [
        {
          issue: 'acme/widgets#19',
          message: 'bot-bottle could not start agent nosuch',
          at: expect.any(String),
        },
      ],
      replicas: [
        { holder: 'bb-1', issues: 1 },
        { holder: 'bb-2', issues: 1 },
      ],
    });
    expect(t.out).toContain('orchestrators: bb-1 (1 issue), bb-2 (1 issue)');
    expect(t.out).toMatch(
      /needs attention:\n {2}acme\/widgets#19 {2}bot-bottle could not start agent nosuch {2}\(/,
    );
    expect(t.out).toMatch(
      /1 event waiting:\n {2}acme\/widgets#17 {2}comment_created {2}deferred since /,
    );
    const empty = io({ BB_HOME: join(home, 'empty') });
    expect(await runCli(['orchestrate', 'status'], empty.io)).toBe(0);
    expect(empty.out).toBe('no managed bottles\n');
  });

  it('usage sums the records of a window; --json is what /api/usage answers; a window it cannot read is a usage error', async () => {
    const t = io({ BB_HOME: home });
    expect(await runCli(['usage', '--since', '2026-11-01'], t.io)).toBe(0);
    expect(t.out).toContain('2 turns, 1,100 tokens, about $0.00 (estimated from the price table)');
    expect(t.out).toMatch(/^2026-11-22 +2 +1,100 +\$0\.00$/m);
    expect(t.out).toMatch(/^implementer +2 +1,100 +\$0\.00$/m);
    expect(t.out).toMatch(/^acme\/widgets#17 +2 +1,100 +\$0\.00$/m);
    const j = io({ BB_HOME: home });
    expect(await runCli(['usage', '--since', '2026-11-01', '--json'], j.io)).toBe(0);
    expect(JSON.parse(j.out)).toMatchObject({
      since: '2026-11-01T00:00:00.000Z',
      total: { turns: 2, tokens: 1100, costUsd: 0.0045 },
    });
    const recent = io({ BB_HOME: home });
    expect(await runCli(['usage'], recent.io)).toBe(0);
    expect(recent.out).toContain(': 0 turns, 0 tokens');
    const bad = io({ BB_HOME: home });
    expect(await runCli(['usage', '--since', 'lately'], bad.io)).toBe(EXIT.USAGE);
    expect(bad.err).toContain('cannot read the time "lately"');
  });

  it('provenance show tells what a turn used and what it cost', async () => {
    const t = io({ BB_HOME: home });
    expect(await runCli(['provenance', 'show', 'implementer-k3x9q'], t.io)).toBe(0);
    expect(t.out).toContain(
      'usage      1,000 in, 100 out, 0 cache read, 0 cache write; about $0.0045; claude-sonnet-4-5-20250929 ×1',
    );
    expect(t.out).toContain('not metered (no model answer went through the proxy)');
  });

  it('provenance show prints a run or a bottle chain as text, JSON or Markdown', async () => {
    const t = io({ BB_HOME: home });
    expect(await runCli(['provenance', 'show', recordId], t.io)).toBe(0);
    expect(t.out).toMatch(/turn +2/);
    const chain = io({ BB_HOME: home });
    expect(await runCli(['provenance', 'show', 'implementer-k3x9q', '--json'], chain.io)).toBe(0);
    expect((JSON.parse(chain.out) as unknown[]).length).toBe(2);
    const md = io({ BB_HOME: home });
    expect(await runCli(['provenance', 'show', recordId, '--md'], md.io)).toBe(0);
    expect(md.out).toMatch(/^## Run /);
    const missing = io({ BB_HOME: home });
    expect(await runCli(['provenance', 'show', 'nope'], missing.io)).toBe(EXIT.FAILURE);
    expect(missing.err).toMatch(/no run record or bottle named "nope"/);
  });

  it('provenance verify passes untouched records and fails a tampered file', async () => {
    const ok = io({ BB_HOME: home });
    expect(await runCli(['provenance', 'verify', 'implementer-k3x9q'], ok.io)).toBe(0);
    expect(ok.out).toMatch(/2 records of implementer-k3x9q: OK/);
    const exported = io({ BB_HOME: home });
    await runCli(['provenance', 'show', 'implementer-k3x9q', '--json'], exported.io);
    const file = join(home, 'chain.json');
    writeFileSync(file, exported.out);
    const fromFile = io({ BB_HOME: home }, home);
    expect(await runCli(['provenance', 'verify', 'chain.json'], fromFile.io)).toBe(0);
    writeFileSync(file, readFileSync(file, 'utf8').replace('turn 1 done', 'turn 1 DONE'));
    const tampered = io({ BB_HOME: home }, home);
    expect(await runCli(['provenance', 'verify', 'chain.json'], tampered.io)).toBe(EXIT.FAILURE);
    expect(tampered.out).toMatch(/FAILED/);
    writeFileSync(file, 'not json');
    const bad = io({ BB_HOME: home }, home);
    expect(await runCli(['provenance', 'verify', 'chain.json'], bad.io)).toBe(EXIT.USAGE);
    expect(bad.err).toMatch(/chain.json is not JSON/);
  });
});

describe('bb doctor', () => {
  let gitea: GiteaTestServer;
  /** A service's configuration against the test forge, for the member bot. */
  const doctorEnv = (home: string) => ({
    BB_HOME: home,
    FORGE_GITEA_API: gitea.apiUrl,
    FORGE_TOKEN: 'bot-token-1234567890',
    FORGE_WEBHOOK_SECRET: 'a-long-secret',
  });
  beforeAll(async () => {
    gitea = await createGiteaTestServer({
      world: {
        users: [
          {
            login: 'bb-bot',
            tokens: ['bot-token-1234567890'],
            scopedTokens: {
              'scoped-token-1234567890': ['write:repository', 'read:user'],
              'right-token-1234567890': [
                'write:repository',
                'write:issue',
                'read:organization',
                'read:user',
              ],
            },
          },
          { login: 'stray', tokens: ['stray-token-1234567890'] },
        ],
        orgs: [{ name: 'bot-bottle', members: ['bb-bot'] }],
        repos: [
          { owner: 'bot-bottle', name: 'admin-here', admins: ['bb-bot'] },
          { owner: 'bb-bot', name: 'own' },
        ],
      },
    });
  });
  afterAll(() => gitea.close());

  it('asks a platform of whole bottles itself, not a Docker engine, naming what its configuration lacks, then holds the cluster to what bottles need', async () => {
    const { FakeKubernetesApi } = await import('@bb/backend-kubernetes/testing');
    // A cluster that enforces nothing: its probe pod reaches the API server's address.
    const api = await FakeKubernetesApi.start({
      kubelet: ({ image }) =>
        image === 'bb-gate:1'
          ? { exit: 2, log: 'RUNTIME ok\nREACHED 10.96.0.1:443\n' }
          : { exit: 0, log: 'NODE v20.19.5\n' },
    });
    const home = mkdtempSync(join(tmpdir(), 'bb-doc-k8s-'));
    const env = {
      ...doctorEnv(home),
      BB_K8S_API: api.url,
      BB_K8S_STATE_CLAIM: 'bb-bottle-state',
    };
    try {
      // --backend names the platform; BB_BACKEND is not set.
      const lacking = io(env);
      expect(await doctorCommand(['--backend', 'kubernetes', '--json'], lacking.io)).toBe(1);
      const first = JSON.parse(lacking.out) as Array<{ check: string; ok: boolean | null }>;
      expect(first.map((c) => c.check)).not.toContain('docker engine');
      expect(first.find((c) => c.check === 'kubernetes backend')).toMatchObject({
        ok: false,
        detail: expect.stringMatching(/BB_K8S_GATE_IMAGE must name the gate image/),
        fix: expect.stringMatching(/kubernetes\.md/),
      });
      expect(first.find((c) => c.check === 'kubernetes cluster')?.ok).toBeNull();
      const whole = await runDoctor(
        io({ ...env, BB_BACKEND: 'kubernetes', BB_K8S_GATE_IMAGE: 'bb-gate:1' }).io,
      );
      expect(whole.find((c) => c.check === 'kubernetes backend')).toMatchObject({
        ok: true,
        detail: 'answers; 0 bottles of this orchestrator',
      });
      // An admin token: every access, and the forbidden ones too; nothing enforced.
      expect(Object.fromEntries(whole.map((c) => [c.check, c.ok]))).toMatchObject({
        'kubernetes access': false,
        'pod security': false,
        'gate image': true,
        'network policy': false,
      });
      expect(api.objects('pods', 'bot-bottle-bottles')).toEqual([]);
      const bad = io(env);
      expect(await doctorCommand(['--backend', 'nomad'], bad.io)).toBe(2);
      expect(bad.err).toMatch(/no backend "nomad"; give one of .*kubernetes/);
    } finally {
      await api.close();
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('names each failure with its fix, and passes the forge checks for a member bot', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-doc-'));
    const env = doctorEnv(home);
    try {
      // An engine that is not there.
      const nowhere = new DockerBackend({
        docker: new (await import('dockerode')).default({ socketPath: join(home, 'no.sock') }),
      });
      const checks = await runDoctor(io(env).io, nowhere);
      expect(checks.find((c) => c.check === 'docker engine')).toMatchObject({
        ok: false,
        fix: expect.stringMatching(/ensure-docker\.sh/),
      });
      expect(checks.find((c) => c.check === 'base image')?.ok).toBeNull();
      expect(checks.find((c) => c.check === 'supervise policy')).toMatchObject({
        ok: true,
        detail: expect.stringMatching(
          /^none: the defaults.*Warning: with an empty egress ceiling, approving any new host needs --override/,
        ),
        fix: expect.stringMatching(/egressCeiling of .*supervise\.json/),
      });
      // A broken policy is named with the field, and the fix.
      mkdirSync(join(home, 'config'), { recursive: true });
      writeFileSync(join(home, 'config', 'supervise.json'), '{"egressCeiling": "pypi.org"}');
      expect(
        (await runDoctor(io(env).io, nowhere)).find((c) => c.check === 'supervise policy'),
      ).toMatchObject({
        ok: false,
        detail: expect.stringMatching(/supervise\.json is invalid: egressCeiling: /),
        fix: 'see docs/supervise.md for the fields',
      });
      writeFileSync(
        join(home, 'config', 'supervise.json'),
        '{"credentialHosts": {"SVC_KEY": ["api.svc.test"]}}',
      );
      expect(
        (await runDoctor(io(env).io, nowhere)).find((c) => c.check === 'supervise policy')?.detail,
      ).toMatch(/secrets offered to bottles: SVC_KEY \(not set here: SVC_KEY/);
      writeFileSync(join(home, 'config', 'supervise.json'), '{"egressCeiling": ["pypi.org"]}');
      const filled = (await runDoctor(io(env).io, nowhere)).find(
        (c) => c.check === 'supervise policy',
      );
      expect(filled?.detail).not.toMatch(/Warning/);
      expect(filled?.fix).toBeUndefined();
      rmSync(join(home, 'config', 'supervise.json'));
      expect(checks.find((c) => c.check === 'forge')).toMatchObject({
        ok: true,
        detail: expect.stringContaining("the token is bb-bot's"),
      });
      expect(checks.find((c) => c.check === 'org membership')?.ok).toBe(true);
      expect(checks.find((c) => c.check === 'token scopes')).toMatchObject({
        ok: true,
        detail: 'the token is not limited to scopes',
      });
      expect(checks.find((c) => c.check === 'repository admin')).toMatchObject({ ok: true });
      // A scoped token: the missing scopes are named (membership then cannot be told either).
      const scoped = await runDoctor(
        io({ ...env, FORGE_TOKEN: 'scoped-token-1234567890' }).io,
        nowhere,
      );
      expect(scoped.find((c) => c.check === 'token scopes')).toMatchObject({
        ok: false,
        detail:
          'the token lacks write:issue, read:organization (it has write:repository, read:user)',
      });
      const right = await runDoctor(
        io({ ...env, FORGE_TOKEN: 'right-token-1234567890' }).io,
        nowhere,
      );
      expect(right.find((c) => c.check === 'token scopes')?.ok).toBe(true);
      // A repository the bot may write to but does not administer is named.
      const writer = await runDoctor(
        io({ ...env, FORGE_REPOS: 'bot-bottle/admin-here' }).io,
        nowhere,
      );
      expect(writer.find((c) => c.check === 'repository admin')?.ok).toBe(true);
      gitea.repos.get('bot-bottle/admin-here')!.admins.clear();
      const notAdmin = await runDoctor(
        io({ ...env, FORGE_REPOS: 'bot-bottle/admin-here' }).io,
        nowhere,
      );
      expect(notAdmin.find((c) => c.check === 'repository admin')).toMatchObject({
        ok: false,
        detail: expect.stringContaining('does not administer bot-bottle/admin-here (write)'),
      });
      gitea.repos.get('bot-bottle/admin-here')!.admins.add('bb-bot');
      // Bottle disks: on here as root, off by configuration, and a bad size named.
      expect(checks.find((c) => c.check === 'bottle disks')?.ok).toBe(process.getuid?.() === 0);
      const off = await runDoctor(io({ ...env, BB_BOTTLE_DISK: 'off' }).io, nowhere);
      expect(off.find((c) => c.check === 'bottle disks')).toMatchObject({
        ok: null,
        detail: expect.stringMatching(/share the host disk/),
      });
      const odd = await runDoctor(io({ ...env, BB_BOTTLE_DISK: 'lots' }).io, nowhere);
      expect(odd.find((c) => c.check === 'bottle disks')?.detail).toMatch(/"lots"/);

      const stray = await runDoctor(
        io({ ...env, FORGE_TOKEN: 'stray-token-1234567890' }).io,
        nowhere,
      );
      expect(stray.find((c) => c.check === 'org membership')).toMatchObject({
        ok: false,
        fix: 'add stray to the bot-bottle organisation on the forge, or set FORGE_ORG to its org',
      });
      const badToken = await runDoctor(
        io({ ...env, FORGE_TOKEN: 'wrong-token-000000' }).io,
        nowhere,
      );
      expect(badToken.find((c) => c.check === 'forge')?.ok).toBe(false);
      expect(JSON.stringify(badToken)).not.toContain('wrong-token-000000');
      mkdirSync(join(home, 'config', 'agents'), { recursive: true });
      writeFileSync(join(home, 'config', 'agents', 'broken.json'), '{');
      const bad = await runDoctor(io({ ...env, FORGE_WEBHOOK_SECRET: 'short' }).io, nowhere);
      expect(bad.find((c) => c.check === 'orchestrator config')).toMatchObject({
        ok: false,
        detail: expect.stringContaining('FORGE_WEBHOOK_SECRET must be at least 8'),
      });
      expect(bad.find((c) => c.check === 'manifests')).toMatchObject({
        ok: false,
        detail: expect.stringContaining('broken.json'),
      });
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('bb doctor exits 1 when a check fails and prints each with its fix', async () => {
    const t = io({ BB_HOME: '/nonexistent-bb-home' });
    const nowhere = new DockerBackend({
      docker: new (await import('dockerode')).default({ socketPath: '/nonexistent/docker.sock' }),
    });
    const code = await runCli(['doctor'], t.io, { backend: () => nowhere });
    // The engine at DOCKER_HOST does not exist.
    expect(code).toBe(1);
    expect(t.out).toMatch(/^FAIL docker engine: /m);
    expect(t.out).toMatch(/^ +fix: start the engine/m);
    expect(t.out).toMatch(
      /^skip forge: skipped: the forge is not configured here \(FORGE_GITEA_API is required/m,
    );
  });
});

describe('bb demo without Docker', () => {
  it('tells the whole story on the local backend, with its warning, and cleans up', async () => {
    const t = io({ NO_COLOR: '1' });
    const code = await runCli(['demo', '--backend', 'local'], t.io);
    expect(t.err).toBe('');
    expect(code).toBe(EXIT.OK);
    expect(t.out).toContain('WARNING: the local backend runs agents as plain processes');
    expect(t.out).toContain('bottles: local');
    expect(t.out).toMatch(/PR #2: "Add a greeting" from branch bb\/demo-1/);
    expect(t.out).toContain('same session: yes');
    expect(t.out).toMatch(/verification of demo-[a-z0-9]{5}'s chain \(key [0-9a-f]{16}\): OK/);
    const home = /state: (\S+)/.exec(t.out)![1]!;
    expect(existsSync(home)).toBe(false);
  }, 120_000);

  it('refuses a bad --agent or --backend, naming the value', async () => {
    const a = io();
    expect(await runCli(['demo', '--agent', 'gpt'], a.io)).toBe(EXIT.USAGE);
    expect(a.err).toMatch(/--agent must be script or claude \(got "gpt"\)/);
    const b = io();
    expect(await runCli(['demo', '--agent', 'claude', '--backend', 'local'], b.io)).toBe(
      EXIT.USAGE,
    );
    expect(b.err).toMatch(/--agent claude runs in the bb-agents image: it needs --backend docker/);
  });
});
