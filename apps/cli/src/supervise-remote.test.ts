// `bb supervise --server`: deciding at another machine's orchestrator. The
// orchestrator's side is the service's own door (createApp with operator tokens)
// and supervise API over this BB_HOME's desk, on loopback; `bb` runs from another
// BB_HOME, with the token `bb operator add` printed. Decisions are recorded as the
// operator the token names, through the API.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { giteaKind } from '@bb/forge';
import { writeFrozenBottle } from '@bb/headless/testing';
import { toNodeListener } from '@bb/lifecycle';
import { createApp, OperatorTokens } from '@bb/service';
import { BbDatabase, MemoryForgeStateStore } from '@bb/state';
import {
  createSuperviseApi,
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseSidecar,
  SuperviseStore,
  serveSupervise,
} from '@bb/supervise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type CliIo, runCli } from './cli';
import { openDesk, takeTarget } from './commands/supervise-desk';
import { captureIo } from './test-io';

const SLUG = 'impl-remote1';

describe('bb supervise --server: decided from another BB_HOME', () => {
  let home: string;
  let elsewhere: string;
  let sidecar: RunningSuperviseServer;
  let client: SuperviseClient;
  let http: Server;
  let url: string;
  let closeDesk: () => void;
  let token = '';

  const run = async (env: Record<string, string>, ...args: string[]) => {
    let out = '';
    let err = '';
    const io: CliIo = {
      env,
      cwd: elsewhere,
      stdout: (t) => (out += t),
      stderr: (t) => (err += t),
    };
    return { code: await runCli(args, io), out, err };
  };
  /** `bb` on the operator's own machine: another BB_HOME, the token in the environment. */
  const remote = (...args: string[]) =>
    run(
      { BB_HOME: elsewhere, USER: 'carol-laptop', BB_OPERATOR_TOKEN: token },
      'supervise',
      '--server',
      url,
      ...args,
    );
  const ask = (allow: string[]) =>
    client.propose(
      'pipelock-block',
      { allowlist: `${JSON.stringify({ allow })}\n`, justification: 'the tests need it' },
      0,
    );
  const decided = async (id: string) => {
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    try {
      return await new SuperviseStore(db).get(id);
    } finally {
      db.close();
    }
  };

  beforeEach(async () => {
    home = mkdtempSync(join(tmpdir(), 'bb-cli-orch-'));
    elsewhere = mkdtempSync(join(tmpdir(), 'bb-cli-laptop-'));
    const bottle = writeFrozenBottle(home, SLUG).dir;
    mkdirSync(join(home, 'config'), { recursive: true });
    writeFileSync(
      join(home, 'config', 'supervise.json'),
      JSON.stringify({ egressCeiling: ['pypi.org'] }),
    );
    sidecar = await serveSupervise(
      new SuperviseSidecar({
        slug: SLUG,
        dir: join(bottle, 'supervise'),
        currentConfig: join(bottle, 'current-config'),
        allowedBases: ['bb-base:latest'],
      }),
      join(home, 's.sock'),
    );
    client = new SuperviseClient({ socketPath: join(home, 's.sock') });
    const made = await run({ BB_HOME: home }, 'operator', 'add', 'carol');
    expect(made.code).toBe(0);
    token = made.out.trim();
    expect(made.err).toMatch(/shown this once/);
    // The orchestrator's door and API over its own BB_HOME, as `serve` composes them.
    const { io } = captureIo({ BB_HOME: home });
    const { desk, state, close } = openDesk(io, {});
    closeDesk = close;
    const tokens = new OperatorTokens(state.database);
    const app = createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 404 }) },
      store: new MemoryForgeStateStore(),
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '0.0.0',
      access: { loopback: true, operator: (t) => tokens.verify(t) },
      supervise: createSuperviseApi(desk),
    });
    http = createServer(toNodeListener(app));
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(http.address() as { port: number }).port}`;
  });
  afterEach(async () => {
    await client.close();
    await sidecar.close();
    await new Promise((r) => http.close(r));
    closeDesk();
    rmSync(home, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  });

  it('lists, shows and approves as the operator the token names; the agent hears it', async () => {
    const a = await ask(['registry.npmjs.org', 'pypi.org']);
    const list = await remote('list');
    expect(list.err).toBe('');
    expect(list.out).toContain(a.request_id);
    const shown = await remote('show', a.request_id);
    expect(shown.out).toMatch(/\+\{"allow":\["registry\.npmjs\.org","pypi\.org"\]\}/);
    const hash = /proposed ([0-9a-f]{12})/.exec(shown.out)![1]!;
    const ok = await remote('approve', a.request_id, '--expect', hash, '--scope', 'bottle');
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/^approved sr_\w+ \(impl-remote1, scope bottle\)/);
    expect(await decided(a.request_id)).toMatchObject({
      status: 'approved',
      decidedBy: 'carol',
      decidedVia: 'api',
    });
    expect((await client.wait(a.request_id, 0)).status).toBe('approved');
    expect((await remote('show', a.request_id)).out).toMatch(/decided by carol \(api\)/);
    // The operator's own edit goes the same way.
    writeFileSync(join(elsewhere, 'mine.json'), '{"allow": ["registry.npmjs.org"]}\n');
    const edit = await remote('allowlist', 'edit', SLUG, '--file', 'mine.json');
    expect(edit.out).toMatch(/^applied impl-remote1's allowlist\.json/);
  });

  it('refuses, changing nothing: no token, a revoked one, --by, --write-manifest, a token file without a server', async () => {
    const a = await ask(['registry.npmjs.org', 'pypi.org']);
    const none = await run(
      { BB_HOME: elsewhere },
      'supervise',
      '--server',
      url,
      'reject',
      a.request_id,
      '--reason',
      'no',
    );
    expect(none.code).toBe(1);
    expect(none.err).toMatch(/needs an operator's own token.*bb operator add NAME/);
    expect((await remote('approve', a.request_id, '--by', 'mallory')).err).toMatch(
      /--by is for this BB_HOME/,
    );
    expect(
      (await remote('approve', a.request_id, '--scope', 'manifest', '--write-manifest')).err,
    ).toMatch(/--scope manifest shows and writes the bottle manifest on the orchestrator's host/);
    expect((await remote('approve', a.request_id, '--write-manifest')).err).toMatch(
      /--write-manifest changes a file on the orchestrator's host/,
    );
    expect(
      (await run({ BB_HOME: elsewhere }, 'supervise', '--token-file', 'x', 'list')).err,
    ).toMatch(/--token-file is for a remote orchestrator/);
    expect((await run({ BB_HOME: home }, 'operator', 'revoke', 'carol')).code).toBe(0);
    const revoked = await remote('approve', a.request_id);
    expect(revoked.code).toBe(1);
    expect(revoked.err).toMatch(/refused the operator token \(401\): it is wrong or was revoked/);
    expect(revoked.err).not.toContain(token);
    // Reading needs no token on loopback: still waiting.
    expect(
      (await run({ BB_HOME: elsewhere }, 'supervise', '--server', url, 'show', a.request_id)).out,
    ).toMatch(/ pending /);
    const listed = await run({ BB_HOME: home }, 'operator', 'list');
    expect(listed.out).toMatch(/^carol\s+made \S+\s+never used\s+revoked /);
  });
});

describe('takeTarget', () => {
  it('takes --server and --token-file wherever they stand, but never from the value of another option', () => {
    expect(takeTarget(['--server', 'http://127.0.0.1:1', 'list'], {})).toEqual({
      target: { server: 'http://127.0.0.1:1' },
      rest: ['list'],
    });
    expect(takeTarget(['list', '--server=https://bb.example'], {}).target.server).toBe(
      'https://bb.example',
    );
    // A reason that reads like the option is the reason.
    const r = takeTarget(['reject', 'sr_x', '--reason', '--server=http://evil.example'], {});
    expect(r.target.server).toBeUndefined();
    expect(r.rest).toEqual(['reject', 'sr_x', '--reason', '--server=http://evil.example']);
    expect(takeTarget(['list'], { BB_SUPERVISE_SERVER: 'https://bb.example' }).target.server).toBe(
      'https://bb.example',
    );
    expect(() => takeTarget(['--token-file', 't', 'list'], {})).toThrow(
      /--token-file is for a remote orchestrator/,
    );
  });
});
