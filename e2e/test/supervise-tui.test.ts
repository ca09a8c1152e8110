// The supervise inbox as an operator uses it: `bb supervise` in a real terminal
// (tmux), keys sent, the screen read back. The requests come from a real
// supervise sidecar over its socket, as an agent's would; the decisions land in
// the database and reach the agent.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFrozenBottle } from '@bb/headless/testing';
import { BbDatabase } from '@bb/state';
import {
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseSidecar,
  SuperviseStore,
  serveSupervise,
} from '@bb/supervise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const BB = fileURLToPath(new URL('../../apps/cli/dist/bin.js', import.meta.url));
const hasTmux = spawnSync('tmux', ['-V']).status === 0;
if (!hasTmux && process.env['BB_REQUIRE_DOCKER'] === '1')
  throw new Error('tmux is required for the inbox test (scripts/ensure-tmux.sh installs it)');

const SLUG = 'impl-tui01';

describe.skipIf(!hasTmux)('bb supervise: the inbox in a real terminal', () => {
  let home: string;
  let server: RunningSuperviseServer;
  let client: SuperviseClient;
  const session = `bb-tui-${process.pid}`;
  const tmux = (...args: string[]) => execFileSync('tmux', args, { encoding: 'utf8' });
  const screen = () => tmux('capture-pane', '-p', '-t', session);
  const waitFor = async (re: RegExp, what: string) => {
    for (let i = 0; i < 150; i++) {
      const s = screen();
      if (re.test(s)) return s;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`the screen never showed ${what}:\n${screen()}`);
  };
  const store = () => {
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    try {
      return new SuperviseStore(db).list();
    } finally {
      db.close();
    }
  };

  beforeAll(async () => {
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
    tmux(
      'new-session',
      '-d',
      '-s',
      session,
      '-x',
      '160',
      '-y',
      '50',
      // Not CI: ink draws a live screen only outside CI.
      `env -u CI BB_HOME=${home} NO_COLOR= TERM=xterm-256color ${process.execPath} ${BB} supervise; echo inbox-exited $?; sleep 30`,
    );
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
    expect(store().find((r) => r.id === first.request_id)).toMatchObject({
      status: 'rejected',
      reason: 'Use the mirror.',
      decidedBy: 'operator',
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
    expect(store().find((r) => r.id === second.request_id)?.status).toBe('pending');
    tmux('send-keys', '-t', session, 'o');
    await waitFor(/OVERRIDE/, 'the override');
    tmux('send-keys', '-t', session, 'a');
    s = await waitFor(/approved sr_/, 'the approval');
    expect(s).toContain("kept for impl-tui01's next turn");
    expect(store().find((r) => r.id === second.request_id)).toMatchObject({
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
  }, 60_000);
});
