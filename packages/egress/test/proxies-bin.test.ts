// The bb-egress command (bundled): SIGHUP reloads; a broken file keeps the old rules.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const bundle = fileURLToPath(new URL('../dist/bundle/bb-egress.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'bb-egress-bin-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ask = (socket: string, target: string) =>
  new Promise<string>((resolve) => {
    const s = connect(socket);
    let out = '';
    s.on('data', (d) => {
      out += d;
      if (out.includes('\r\n')) {
        s.destroy();
        resolve(out.split('\r\n')[0]!);
      }
    });
    s.on('error', () => resolve(out));
    s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  });

describe('bb-egress', () => {
  it('reloads on SIGHUP, and keeps the old rules when the new file is broken', async () => {
    expect(existsSync(bundle), 'build the package first').toBe(true);
    const rules = join(dir, 'rules.json');
    const routes = join(dir, 'routes.json');
    writeFileSync(rules, JSON.stringify({ allow: ['first.test:443'] }));
    writeFileSync(routes, JSON.stringify({ routes: [] }));
    const env = {
      PATH: process.env['PATH'],
      BB_EGRESS_RULES: rules,
      BB_CRED_ROUTES: routes,
      BB_EGRESS_SOCKET: join(dir, 'e.sock'),
      BB_CRED_SOCKET: join(dir, 'c.sock'),
      BB_EGRESS_LOG: join(dir, 'egress.jsonl'),
    };
    const child = spawn(process.execPath, [bundle], { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    try {
      for (let i = 0; i < 100 && !existsSync(env.BB_CRED_SOCKET); i++)
        await new Promise((r) => setTimeout(r, 30));
      // first.test is allowed (it would then fail to resolve: nothing leaves this machine).
      expect(await ask(env.BB_EGRESS_SOCKET, 'second.test:443')).toMatch(/403/);
      writeFileSync(rules, '{"allow": [');
      child.kill('SIGHUP');
      for (let i = 0; i < 50 && !stderr.includes('NOT reloaded'); i++)
        await new Promise((r) => setTimeout(r, 30));
      expect(stderr).toContain('egress rules NOT reloaded, keeping the old ones');
      expect(await ask(env.BB_EGRESS_SOCKET, 'second.test:443')).toMatch(/403/);
      writeFileSync(rules, JSON.stringify({ allow: ['second.test:443'] }));
      child.kill('SIGHUP');
      for (let i = 0; i < 50 && !stderr.includes('egress rules reloaded'); i++)
        await new Promise((r) => setTimeout(r, 30));
      expect(await ask(env.BB_EGRESS_SOCKET, 'first.test:443')).toMatch(/403/);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('exit', r));
    }
  });
});
