// The bottle's gate: one process serving the forge sidecar, the supervise sidecar and
// the proxies, each on its own socket, resolving secrets from its secrets file only.
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { freePort } from '@bb/tooling/net';
import { afterEach, describe, expect, it } from 'vitest';
import { routeSecrets } from '../src/bottle/gate';
import { runGateFromEnv } from '../src/bottle/gate-main';
import { withUpstream } from './support-upstream';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A gate's environment for supervise and the proxies, on local paths. */
function gateEnv(routes: unknown, secrets?: Record<string, string>) {
  const d = mkdtempSync(join(tmpdir(), 'bb-gate-'));
  dirs.push(d);
  for (const s of ['sock', 'state', 'proxy', 'supervise', 'current-config']) mkdirSync(join(d, s));
  writeFileSync(join(d, 'proxy', 'rules.json'), JSON.stringify({ allow: [] }));
  writeFileSync(join(d, 'proxy', 'routes.json'), JSON.stringify({ routes }));
  if (secrets) writeFileSync(join(d, 'keys.json'), JSON.stringify(secrets));
  return {
    dir: d,
    env: {
      BB_SLUG: 'gate-test',
      BB_SUPERVISE_SOCKET: join(d, 'sock', 'supervise.sock'),
      BB_SUPERVISE_DIR: join(d, 'supervise'),
      BB_CURRENT_CONFIG: join(d, 'current-config'),
      BB_EGRESS_RULES: join(d, 'proxy', 'rules.json'),
      BB_CRED_ROUTES: join(d, 'proxy', 'routes.json'),
      BB_EGRESS_SOCKET: join(d, 'sock', 'egress.sock'),
      BB_CRED_SOCKET: join(d, 'sock', 'cred.sock'),
      BB_EGRESS_LOG: join(d, 'state', 'egress.jsonl'),
      ...(secrets ? { BB_CRED_SECRETS_FILE: join(d, 'keys.json') } : {}),
    } as Record<string, string>,
  };
}

/** A GET through a proxy's socket: the body it answers. */
async function through(socketPath: string, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: 'GET' }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('the gate', () => {
  it('serves supervise and both proxies from one process, and closes them all', async () => {
    await withUpstream(async (up) => {
      const { dir, env } = gateEnv(
        [{ prefix: '/svc', upstream: up.url, headers: { 'x-key': 'env:SVC_KEY' } }],
        { SVC_KEY: 'svc-key-in-the-secrets-file' },
      );
      const gate = await runGateFromEnv(env);
      expect(gate.surfaces).toEqual(['supervise', 'proxies']);
      for (const s of ['supervise.sock', 'egress.sock', 'cred.sock'])
        expect(existsSync(join(dir, 'sock', s)), s).toBe(true);
      // The key from the secrets file reaches the upstream.
      expect(await through(join(dir, 'sock', 'cred.sock'), '/svc/x')).toBe('ok');
      expect(up.keys).toEqual(['svc-key-in-the-secrets-file']);
      await gate.close();
      for (const s of ['supervise.sock', 'egress.sock', 'cred.sock'])
        expect(existsSync(join(dir, 'sock', s)), s).toBe(false);
    });
  });

  it("never resolves a route's secret from its own environment or filesystem", async () => {
    // A variable in the gate's environment, and a file it can read (as it could its token's).
    const readable = join(mkdtempSync(join(tmpdir(), 'bb-gate-file-')), 'token');
    dirs.push(join(readable, '..'));
    writeFileSync(readable, 'a-token-the-gate-holds');
    for (const ref of ['env:GATE_OWN_VAR', `file:${readable}`]) {
      const { dir, env } = gateEnv([
        { prefix: '/x', upstream: 'http://127.0.0.1:9/', headers: { 'x-key': ref } },
      ]);
      const err = await runGateFromEnv({ ...env, GATE_OWN_VAR: 'from-the-environment' }).catch(
        (e: unknown) => e,
      );
      expect(isBbError(err), String(err)).toBe(true);
      expect((err as Error).message).toMatch(/proxies surface did not start.*is not set/);
      expect((err as Error).message).not.toContain('a-token-the-gate-holds');
      // What had started (supervise) was closed again.
      expect(existsSync(join(dir, 'sock', 'supervise.sock'))).toBe(false);
    }
  });

  it('takes a file reference from its secrets file, as the host read it', async () => {
    await withUpstream(async (up) => {
      const { dir, env } = gateEnv(
        [{ prefix: '/f', upstream: up.url, headers: { 'x-key': 'file:/operator/key' } }],
        { 'file:/operator/key': 'the-operator-file-key' },
      );
      const gate = await runGateFromEnv(env);
      expect(await through(join(dir, 'sock', 'cred.sock'), '/f/y')).toBe('ok');
      expect(up.keys).toEqual(['the-operator-file-key']);
      await gate.close();
    });
  });

  it("serves its surfaces on its TCP port to a connection with the bottle's key, and starts nothing without a key", async () => {
    await withUpstream(async (up) => {
      const { dir, env } = gateEnv([{ prefix: '/svc', upstream: up.url, headers: {} }]);
      const { connect } = await import('node:net');
      const port = String(await freePort());
      const keyless = await runGateFromEnv({ ...env, BB_GATE_PORT: port }).catch((e: unknown) => e);
      expect(isBbError(keyless, 'INVALID_INPUT')).toBe(true);
      expect(String(keyless)).toMatch(/BB_GATE_PORT needs BB_GATE_KEY_FILE/);
      // Nothing it had started is left serving.
      expect(existsSync(join(dir, 'sock', 'cred.sock'))).toBe(false);
      const key = 'ef'.repeat(24);
      writeFileSync(join(dir, 'link-key'), `${key}\n`);
      const gate = await runGateFromEnv({
        ...env,
        BB_GATE_PORT: port,
        BB_GATE_KEY_FILE: join(dir, 'link-key'),
      });
      const ask = (first: string) =>
        new Promise<string>((resolve) => {
          const c = connect(Number(port), '127.0.0.1');
          let got = '';
          c.on('data', (d: Buffer) => (got += d.toString()));
          c.on('close', () => resolve(got));
          c.on('error', () => resolve(got));
          c.write(`${first}GET /svc/x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`);
        });
      expect(await ask(`bb-gate credentials ${key}\n`)).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(await ask(`bb-gate credentials ${'0'.repeat(48)}\n`)).toBe('');
      await gate.close();
    });
  });

  it('refuses to start with nothing to serve', async () => {
    const err = await runGateFromEnv({}).catch((e: unknown) => e);
    expect(isBbError(err, 'INVALID_INPUT')).toBe(true);
    expect((err as Error).message).toContain('BB_SIDECAR_SOCKET');
  });
});

describe('routeSecrets (the host resolving what a gate gets)', () => {
  it('reads env references from its environment and file references from the host', () => {
    const d = mkdtempSync(join(tmpdir(), 'bb-routes-'));
    dirs.push(d);
    writeFileSync(join(d, 'key'), 'file-key\n');
    const routes = JSON.stringify({
      routes: [
        { prefix: '/a', upstream: 'http://127.0.0.1:9/', headers: { 'x-a': 'env:ROUTE_A' } },
        {
          prefix: '/b',
          upstream: 'http://127.0.0.1:9/',
          headers: { 'x-b': `file:${join(d, 'key')}` },
        },
      ],
    });
    expect(routeSecrets(routes, { ROUTE_A: 'env-key' })).toEqual({
      ROUTE_A: 'env-key',
      [`file:${join(d, 'key')}`]: 'file-key',
    });
    const missing = JSON.stringify({
      routes: [
        {
          prefix: '/c',
          upstream: 'http://127.0.0.1:9/',
          headers: { 'x-c': `file:${join(d, 'nope')}` },
        },
      ],
    });
    expect(() => routeSecrets(missing, {})).toThrow(/\/c needs .*nope, which cannot be read/);
  });

  it("refuses a file reference to bot-bottle's own files or the kernel's, through links too", () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-routes-home-'));
    dirs.push(home);
    writeFileSync(join(home, 'token'), 'a-secret-of-bot-bottle');
    const elsewhere = mkdtempSync(join(tmpdir(), 'bb-routes-link-'));
    dirs.push(elsewhere);
    symlinkSync(join(home, 'token'), join(elsewhere, 'innocent'));
    const route = (path: string) =>
      JSON.stringify({
        routes: [
          { prefix: '/x', upstream: 'http://127.0.0.1:9/', headers: { 'x-k': `file:${path}` } },
        ],
      });
    for (const path of [join(home, 'token'), join(elsewhere, 'innocent'), '/proc/self/environ'])
      expect(() => routeSecrets(route(path), { BB_HOME: home }), path).toThrow(
        /bot-bottle's own or the kernel's/,
      );
    // A GitHub App's private key, wherever the operator keeps it.
    const key = join(elsewhere, 'app.pem');
    writeFileSync(key, '-----BEGIN RSA PRIVATE KEY-----\nnot really\n');
    expect(() =>
      routeSecrets(route(key), { BB_HOME: home, FORGE_GITHUB_APP_KEY_FILE: key }),
    ).toThrow(/bot-bottle's own or the kernel's/);
    expect(routeSecrets(route(key), { BB_HOME: home })[`file:${key}`]).toMatch(/not really/);
  });
});
