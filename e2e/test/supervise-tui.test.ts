// The supervise inbox as an operator uses it: `bb supervise` in a real terminal
// (tmux), keys sent, the screen read back. The requests come from a real
// supervise sidecar over its socket, as an agent's would; the decisions land in
// the database and reach the agent.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { giteaKind } from '@bb/forge';
import { bottleRemediator, DockerBackend, supervisedBottles } from '@bb/headless';
import { writeFrozenBottle } from '@bb/headless/testing';
import { toNodeListener } from '@bb/lifecycle';
import { createApp, OperatorTokens } from '@bb/service';
import { BbDatabase, MemoryForgeStateStore } from '@bb/state';
import {
  createSuperviseApi,
  loadPolicy,
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseDesk,
  SuperviseSidecar,
  SuperviseStore,
  serveSupervise,
} from '@bb/supervise';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BB = fileURLToPath(new URL('../../apps/cli/dist/bin.js', import.meta.url));
const hasTmux = spawnSync('tmux', ['-V']).status === 0;
if (!hasTmux && process.env['BB_REQUIRE_DOCKER'] === '1')
  throw new Error('tmux is required for the inbox test (scripts/ensure-tmux.sh installs it)');

const SLUG = 'impl-tui01';
const docker = await probeDocker();

describe.skipIf(!hasTmux)('bb supervise: the inbox in a real terminal', () => {
  let home: string;
  let server: RunningSuperviseServer;
  let client: SuperviseClient;
  const session = `bb-tui-${process.pid}`;
  const tmux = (...args: string[]) => execFileSync('tmux', args, { encoding: 'utf8' });
  const screen = (on = session) => tmux('capture-pane', '-p', '-t', on);
  const waitFor = async (re: RegExp, what: string, on = session, ms = 15_000) => {
    const end = Date.now() + ms;
    for (;;) {
      const s = screen(on);
      if (re.test(s)) return s;
      if (Date.now() > end) throw new Error(`the screen never showed ${what}:\n${s}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  /** `bb supervise` in a new tmux session `name` (its own BB_HOME unless `vars` says), with more of its words. */
  const openInbox = (name: string, vars: string, args = '', rows = 50) =>
    tmux(
      'new-session',
      '-d',
      '-s',
      name,
      '-x',
      '160',
      '-y',
      String(rows),
      // Not CI: ink draws a live screen only outside CI.
      `env -u CI ${vars} NO_COLOR= TERM=xterm-256color ${process.execPath} ${BB} supervise${args}; echo inbox-exited $?; sleep 30`,
    );
  const store = () => {
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    try {
      return new SuperviseStore(db).list();
    } finally {
      db.close();
    }
  };

  beforeAll(async () => {
    // One session kept for the whole suite: a test's own ending never takes the tmux
    // server down while the next one starts its session.
    tmux('new-session', '-d', '-s', `${session}-keep`, 'sleep 600');
    home = mkdtempSync(join(tmpdir(), 'bb-tui-'));
    // A frozen bottle: an approval is kept for its next turn (no proxy to reload).
    const bottle = writeFrozenBottle(home, SLUG).dir;
    server = await serveSupervise(
      new SuperviseSidecar({
        slug: SLUG,
        dir: join(bottle, 'supervise'),
        currentConfig: join(bottle, 'current-config'),
        allowedBases: ['bb-base:latest'],
        waitMs: 0,
      }),
      join(home, 'supervise.sock'),
    );
    client = new SuperviseClient({ socketPath: join(home, 'supervise.sock') });
  });
  afterAll(async () => {
    spawnSync('tmux', ['kill-session', '-t', session]);
    spawnSync('tmux', ['kill-session', '-t', `${session}-keep`]);
    await client?.close();
    await server?.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('shows a request with its diff and findings; r rejects with a typed reason; a approves; q quits', async () => {
    const first = await client.propose('pipelock-block', {
      allowlist: '{"allow": ["registry.npmjs.org", "*.evil.test"]}\n',
      justification: 'I want everything under evil.test',
    });
    expect(first.status).toBe('pending');
    openInbox(session, `BB_HOME=${home} BB_OPERATOR=erin`);
    let s = await waitFor(/1 pending/, 'the pending request');
    expect(s).toContain(first.request_id);
    expect(s).toContain('why: I want everything under evil.test');
    expect(s).toMatch(/\+\{"allow": \["registry.npmjs.org", "\*\.evil\.test"\]\}/);
    expect(s).toMatch(/medium: \*\.evil\.test opens every subdomain of evil\.test/);

    tmux('send-keys', '-t', session, 'r');
    await waitFor(/reason for rejecting/, 'the reason prompt');
    tmux('send-keys', '-t', session, '-l', 'Use the mirror.');
    tmux('send-keys', '-t', session, 'Enter');
    s = await waitFor(/rejected sr_/, 'the rejection');
    expect(s).toMatch(/0 pending/);
    expect((await store()).find((r) => r.id === first.request_id)).toMatchObject({
      status: 'rejected',
      reason: 'Use the mirror.',
      decidedBy: 'erin',
      decidedVia: 'tui',
    });
    expect(await client.wait(first.request_id, 0)).toMatchObject({
      status: 'rejected',
      reason: 'Use the mirror.',
    });

    const second = await client.propose('pipelock-block', {
      allowlist: '{"allow": ["registry.npmjs.org", "pypi.org"]}\n',
      justification: 'pip needs pypi.org for the test dependencies',
    });
    await waitFor(/1 pending/, 'the second request');
    tmux('send-keys', '-t', session, 's');
    await waitFor(/scope: bottle/, 'the scope change');
    // Past the operator's ceiling (empty here): refused until overridden, knowingly.
    tmux('send-keys', '-t', session, 'a');
    await waitFor(/goes beyond the operator's ceiling/, 'the ceiling refusal');
    expect((await store()).find((r) => r.id === second.request_id)?.status).toBe('pending');
    tmux('send-keys', '-t', session, 'o');
    await waitFor(/OVERRIDE/, 'the override');
    tmux('send-keys', '-t', session, 'a');
    s = await waitFor(/approved sr_/, 'the approval');
    expect(s).toContain("kept for impl-tui01's next turn");
    expect((await store()).find((r) => r.id === second.request_id)).toMatchObject({
      status: 'approved',
      scope: 'bottle',
      override: true,
    });
    expect(
      readFileSync(join(home, 'bottles', SLUG, 'overrides', 'allowlist.json'), 'utf8'),
    ).toContain('pypi.org');
    expect(await client.wait(second.request_id, 0)).toMatchObject({
      status: 'approved',
      scope: 'bottle',
    });

    tmux('send-keys', '-t', session, 'q');
    await waitFor(/inbox-exited 0/, 'the inbox to close');
    spawnSync('tmux', ['kill-session', '-t', session]);
  }, 60_000);

  it("against a remote orchestrator: the diff scrolls a page at a time, and the approval is the token's operator's, through the API", async () => {
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    const token = await new OperatorTokens(db).add('dana');
    const desk = new SuperviseDesk({
      store: new SuperviseStore(db),
      bottles: supervisedBottles({ BB_HOME: home }),
      policy: loadPolicy(home),
      remediator: bottleRemediator({ backend: new DockerBackend(), env: { BB_HOME: home } }),
    });
    const tokens = new OperatorTokens(db);
    const app = createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 404 }) },
      store: new MemoryForgeStateStore(),
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '0.0.0',
      access: { loopback: true, operator: (t) => tokens.verify(t) },
      supervise: createSuperviseApi(desk),
    });
    const http = createServer(toNodeListener(app));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(http.address() as { port: number }).port}`;
    const laptop = mkdtempSync(join(tmpdir(), 'bb-tui-laptop-'));
    const remote = `${session}-remote`;
    try {
      // Eighty hosts, one a line: far more diff than the 40-row screen shows.
      const hosts = Array.from(
        { length: 80 },
        (_, i) => `host${String(i).padStart(2, '0')}.example.org`,
      );
      const asked = await client.propose('pipelock-block', {
        allowlist: `${JSON.stringify({ allow: ['registry.npmjs.org', ...hosts] }, null, 1)}\n`,
        justification: 'the integration tests talk to eighty mirrors',
      });
      openInbox(remote, `BB_HOME=${laptop} BB_OPERATOR_TOKEN=${token}`, ` --server ${url}`, 40);
      const on = (re: RegExp, what: string) => waitFor(re, what, remote);
      let s = await on(/1 pending/, 'the request, from the remote orchestrator');
      expect(s).toContain(url);
      expect(s).toContain(asked.request_id);
      expect(s).toMatch(/diff lines 1–\d+ of 8\d/);
      // The diff's own lines (`+  "host00.example.org",`), not the findings above it.
      const inDiff = (host: string) => s.includes(`"${host}.example.org"`);
      expect(inDiff('host00')).toBe(true);
      expect(inDiff('host79')).toBe(false);
      // The whole screen fits the terminal: nothing scrolled off its top.
      expect(s.split('\n')[0]).toMatch(/bot-bottle supervise/);
      tmux('send-keys', '-t', remote, 'Space');
      s = await on(/diff lines (?!1–)\d+–/, 'the next page');
      expect(inDiff('host00')).toBe(false);
      // A page at a time to the end, where the scroll stops.
      for (let i = 0; i < 8 && !/"host79\.example\.org"/.test(s); i++) {
        tmux('send-keys', '-t', remote, 'Space');
        await new Promise((r) => setTimeout(r, 300));
        s = screen(remote);
      }
      s = await on(/"host79\.example\.org"/, 'the last page');
      expect(s).toMatch(/diff lines \d+–89 of 89/);
      expect(s.split('\n')[0]).toMatch(/bot-bottle supervise/);
      tmux('send-keys', '-t', remote, 'b');
      await on(/diff lines \d+–\d+ of/, 'a page back');
      // The bottle is frozen: only an approval kept for the bottle means anything now.
      tmux('send-keys', '-t', remote, 's');
      await on(/scope: bottle/, 'the scope');
      tmux('send-keys', '-t', remote, 'o');
      await on(/OVERRIDE/, 'the override');
      tmux('send-keys', '-t', remote, 'a');
      s = await on(/approved sr_/, 'the approval');
      expect((await store()).find((r) => r.id === asked.request_id)).toMatchObject({
        status: 'approved',
        decidedBy: 'dana',
        decidedVia: 'api',
        override: true,
        scope: 'bottle',
      });
      expect(s).toMatch(/kept for impl-tui01's next turn/);
      expect(await client.wait(asked.request_id, 0)).toMatchObject({ status: 'approved' });
      tmux('send-keys', '-t', remote, 'q');
      await on(/inbox-exited 0/, 'the inbox to close');
    } finally {
      spawnSync('tmux', ['kill-session', '-t', remote]);
      await new Promise((r) => http.close(r));
      db.close();
      rmSync(laptop, { recursive: true, force: true });
    }
  }, 60_000);

  it('a request decided elsewhere never hands its keys to the next one', async () => {
    const a = await client.propose('pipelock-block', {
      allowlist: '{"allow": ["registry.npmjs.org", "a.example.org"]}\n',
      justification: 'the first request, the one the operator reads',
    });
    const b = await client.propose('pipelock-block', {
      allowlist: '{"allow": ["registry.npmjs.org", "b.example.org"]}\n',
      justification: 'the second request, never read',
    });
    const lost = `${session}-lost`;
    openInbox(lost, `BB_HOME=${home} BB_OPERATOR=erin`);
    const on = (re: RegExp, what: string) => waitFor(re, what, lost);
    try {
      await on(/2 pending/, 'both requests');
      await on(/why: the first request/, 'the first request chosen');
      tmux('send-keys', '-t', lost, 'o');
      await on(/OVERRIDE/, 'the override, set up for the first request');
      // Decided elsewhere (another operator, over the API or on the forge).
      const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
      try {
        await new SuperviseDesk({
          store: new SuperviseStore(db),
          bottles: supervisedBottles({ BB_HOME: home }),
          policy: loadPolicy(home),
        }).reject(a.request_id, 'decided by someone else', { by: 'frank', via: 'api' });
      } finally {
        db.close();
      }
      const s = await on(/decided elsewhere or ended/, 'the notice');
      expect(s).not.toContain('OVERRIDE');
      expect(s).not.toContain('why: the second request');
      // The operator's next key was meant for the first request: it decides nothing.
      tmux('send-keys', '-t', lost, 'a');
      await new Promise((r) => setTimeout(r, 1500));
      expect((await store()).find((r) => r.id === b.request_id)?.status).toBe('pending');
      // Chosen on purpose, it can be decided.
      tmux('send-keys', '-t', lost, 'Down');
      await on(/why: the second request/, 'the second request chosen');
      tmux('send-keys', '-t', lost, 'r');
      await on(/reason for rejecting/, 'the reason prompt');
      tmux('send-keys', '-t', lost, '-l', 'Not now.');
      tmux('send-keys', '-t', lost, 'Enter');
      await on(/rejected sr_/, 'the rejection');
      expect((await store()).find((r) => r.id === b.request_id)).toMatchObject({
        status: 'rejected',
        decidedBy: 'erin',
      });
      tmux('send-keys', '-t', lost, 'q');
      await on(/inbox-exited 0/, 'the inbox to close');
    } finally {
      spawnSync('tmux', ['kill-session', '-t', lost]);
    }
  }, 60_000);

  it.skipIf(!docker.ok)(
    "a rebuild's build lines are drawn inside the inbox, never over it",
    async () => {
      const asked = await client.propose('capability-block', {
        dockerfile: `FROM ${BASE_IMAGE}\nRUN echo tui-build-step-ran > /tmp/tui-marker\n`,
        justification: 'the tests need a marker file in the image',
      });
      openInbox(session, `BB_HOME=${home} BB_OPERATOR=erin`);
      await waitFor(/1 pending/, 'the Dockerfile request');
      tmux('send-keys', '-t', session, 'a');
      const s = await waitFor(/approved sr_\w+: rebuilt as/, 'the rebuild', session, 120_000);
      // Before, each build line was written to the terminal under the inbox's feet.
      const stray = s.split('\n').filter((l) => /building bb-rebuilt-|tui-build-step-ran/.test(l));
      expect(stray, s).toEqual([]);
      expect(s.split('\n')[0]).toMatch(/bot-bottle supervise/);
      expect((await store()).find((r) => r.id === asked.request_id)).toMatchObject({
        status: 'approved',
        decidedBy: 'erin',
        decidedVia: 'tui',
        scope: 'bottle',
      });
      tmux('send-keys', '-t', session, 'q');
      await waitFor(/inbox-exited 0/, 'the inbox to close');
      spawnSync('tmux', ['kill-session', '-t', session]);
    },
    180_000,
  );
});
