// `bb supervise` without a terminal, on a frozen bottle (an approval is kept for its
// next turn: no proxy to reload, no Docker needed): list, show, approve with the
// manifest scope, reject, the operator's own edit, and the errors people meet.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFrozenBottle } from '@bb/headless/testing';
import {
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseSidecar,
  serveSupervise,
} from '@bb/supervise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type CliIo, runCli } from './cli';

const SLUG = 'impl-cli01';

describe('bb supervise', () => {
  let home: string;
  let server: RunningSuperviseServer;
  let client: SuperviseClient;
  const bb = async (...args: string[]) => {
    let out = '';
    let err = '';
    const io: CliIo = {
      env: { BB_HOME: home, USER: 'alice' },
      cwd: home,
      stdout: (t) => (out += t),
      stderr: (t) => (err += t),
    };
    return { code: await runCli(['supervise', ...args], io), out, err };
  };
  const ask = (allow: string[]) =>
    client.propose(
      'pipelock-block',
      { allowlist: `${JSON.stringify({ allow })}\n`, justification: 'the tests need it' },
      0,
    );

  beforeEach(async () => {
    home = mkdtempSync(join(tmpdir(), 'bb-cli-supervise-'));
    const bottle = writeFrozenBottle(home, SLUG).dir;
    mkdirSync(join(home, 'config', 'bottles'), { recursive: true });
    writeFileSync(
      join(home, 'config', 'bottles', 'default.json'),
      `${JSON.stringify({ image: 'bb-base:latest', egress: { allow: ['registry.npmjs.org'] } }, null, 2)}\n`,
    );
    writeFileSync(
      join(home, 'config', 'supervise.json'),
      JSON.stringify({ egressCeiling: ['pypi.org', 'files.pythonhosted.org'] }),
    );
    server = await serveSupervise(
      new SuperviseSidecar({
        slug: SLUG,
        dir: join(bottle, 'supervise'),
        currentConfig: join(bottle, 'current-config'),
        allowedBases: ['bb-base:latest'],
      }),
      join(home, 's.sock'),
    );
    client = new SuperviseClient({ socketPath: join(home, 's.sock') });
  });
  afterEach(async () => {
    await client.close();
    await server.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('lists and shows a request; approves it for the manifest, writing it only when asked', async () => {
    const a = await ask(['registry.npmjs.org', 'pypi.org']);
    const list = await bb('list', '--json');
    expect(list.code).toBe(0);
    expect(JSON.parse(list.out)).toEqual([
      expect.objectContaining({
        id: a.request_id,
        slug: SLUG,
        kind: 'allowlist',
        status: 'pending',
      }),
    ]);
    const show = await bb('show', a.request_id);
    expect(show.out).toContain('why: the tests need it');
    expect(show.out).toMatch(/^\+.*pypi\.org/m);
    expect(show.out).toMatch(/base [0-9a-f]{12} -> proposed [0-9a-f]{12}/);
    // A stale review is refused: the hash named is not the proposal's.
    const stale = await bb('approve', a.request_id, '--expect', '0000000000');
    expect(stale.code).toBe(1);
    expect(stale.err).toMatch(/not the one you reviewed/);
    const ok = await bb('approve', a.request_id, '--scope', 'manifest');
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/^approved sr_\w+ \(impl-cli01, scope manifest\)/);
    expect(ok.out).toMatch(/^\+ {6}"pypi\.org"/m);
    expect(ok.out).toContain('not written: run again with --write-manifest');
    expect(readFileSync(join(home, 'config', 'bottles', 'default.json'), 'utf8')).not.toContain(
      'pypi.org',
    );
    const b = await ask(['registry.npmjs.org', 'pypi.org', 'files.pythonhosted.org']);
    expect(
      (await bb('approve', b.request_id, '--scope', 'manifest', '--write-manifest')).code,
    ).toBe(0);
    expect(
      JSON.parse(readFileSync(join(home, 'config', 'bottles', 'default.json'), 'utf8')).egress
        .allow,
    ).toEqual(['registry.npmjs.org', 'pypi.org', 'files.pythonhosted.org']);
    expect((await client.wait(b.request_id, 0)).status).toBe('approved');
  });

  it('approves a rebuild for the bottle when no scope is given, and refuses one for a turn', async () => {
    const a = await client.propose(
      'capability-block',
      { dockerfile: 'FROM bb-base:latest\nRUN true\n', justification: 'needs a tool' },
      0,
    );
    const turn = await bb('approve', a.request_id, '--scope', 'turn');
    expect(turn.code).toBe(2);
    expect(turn.err).toMatch(/stays for the bottle: approve it with scope bottle/);
    // Unsaid, a rebuild is for the bottle: what stops it here is the missing engine, not the scope.
    const unsaid = await bb('approve', a.request_id);
    expect(unsaid.err).not.toMatch(/scope/);
  });

  it('says plainly that the inbox needs a terminal, instead of failing in its renderer', async () => {
    const r = await bb('inbox');
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/bb supervise inbox needs a terminal; without one use bb supervise list/);
    expect(r.err).not.toMatch(/at .*\.js:\d+/);
  });

  it('rejects only with a reason; refuses unknown ids, scopes and a decided request, changing nothing', async () => {
    const a = await ask(['registry.npmjs.org', 'pypi.org']);
    const noReason = await bb('reject', a.request_id);
    expect(noReason.code).toBe(2);
    expect(noReason.err).toMatch(/needs --reason TEXT/);
    expect((await bb('approve', a.request_id, '--scope', 'forever')).err).toMatch(
      /--scope must be turn, bottle, manifest/,
    );
    expect((await bb('show', 'sr_00000000000000000000')).err).toMatch(
      /no supervise request sr_0+: bb supervise list shows them/,
    );
    expect((await bb('reject', a.request_id, '--reason', 'Use the mirror.', '--json')).code).toBe(
      0,
    );
    const again = await bb('approve', a.request_id);
    expect(again.code).toBe(1);
    expect(again.err).toMatch(/already rejected \(by alice\)/);
    expect(await client.wait(a.request_id, 0)).toMatchObject({
      status: 'rejected',
      reason: 'Use the mirror.',
    });
  });

  it("the operator's own allowlist edit is checked, applied and kept like an approved request", async () => {
    writeFileSync(join(home, 'bad.json'), '{"allow": ["*"]}');
    const bad = await bb('allowlist', 'edit', SLUG, '--file', 'bad.json');
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/allows too much/);
    writeFileSync(
      join(home, 'mine.json'),
      '{"allow": ["registry.npmjs.org", "internal.example.com"]}\n',
    );
    const ok = await bb('allowlist', 'edit', SLUG, '--file', 'mine.json');
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/^applied impl-cli01's allowlist.json/);
    expect(
      readFileSync(join(home, 'bottles', SLUG, 'overrides', 'allowlist.json'), 'utf8'),
    ).toContain('internal.example.com');
    const all = JSON.parse((await bb('list', '--all', '--json')).out) as Array<{
      tool: string;
      status: string;
      decidedBy: string;
    }>;
    expect(all).toEqual([
      expect.objectContaining({ tool: 'operator-edit', status: 'approved', decidedBy: 'alice' }),
    ]);
    expect((await bb('allowlist', 'edit', 'no-such-bottle', '--file', 'mine.json')).err).toMatch(
      /no bottle no-such-bottle/,
    );
  });
});
