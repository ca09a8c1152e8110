import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url));

/** `bb-orchestrator` with only `env` (no inherited configuration). */
async function start(env: Record<string, string>) {
  try {
    const out = await run(process.execPath, [MAIN], {
      env: { PATH: process.env['PATH'] ?? '', ...env },
      timeout: 20_000,
    });
    return { code: 0, stderr: out.stderr };
  } catch (err) {
    const e = err as { code?: number; stderr?: string };
    return { code: e.code ?? -1, stderr: e.stderr ?? '' };
  }
}

describe('bb-orchestrator', () => {
  it('refuses to start without its configuration, naming each missing value and the forge kind’s own', async () => {
    const r = await start({ BB_HOME: '/nonexistent/bb-home' });
    expect(r.code).toBe(1);
    for (const name of ['FORGE_TOKEN', 'FORGE_WEBHOOK_SECRET', 'FORGE_GITEA_API'])
      expect(r.stderr).toContain(name);
  });

  it('names the forge kinds it knows when FORGE_KIND names another', async () => {
    const r = await start({
      FORGE_KIND: 'nope',
      FORGE_TOKEN: 'x',
      FORGE_WEBHOOK_SECRET: 'a-long-enough-secret',
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/FORGE_KIND "nope" is not a known forge kind: use one of gitea/);
  });
});
