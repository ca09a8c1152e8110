// A reload for a gate that watches its files (a pod's, which nobody signals): the
// files and a generation are written, the gate's status is waited for, and a reload
// that was never confirmed is undone, so the desk never records as failed a grant
// that is in force. A secret the gate does not hold is refused.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { bottlePaths, readMeta, writeMeta } from '../src/bottle/layout';
import { reloadBottleProxies } from '../src/bottle/supervise-remedy';
import { writeFrozenBottle } from '../src/test-home';

const SLUG = 'watch-a1';
const OLD = '{"allow":["registry.npmjs.org"]}';
const NEW = '{"allow":["registry.npmjs.org","pypi.org"]}';

describe('reloading a gate that watches its files', () => {
  let home: string;
  let env: Record<string, string>;
  beforeEach(() => {
    home = mkdtempSync(join(tmpdir(), 'bb-remedy-watch-'));
    env = { BB_HOME: home };
    writeFrozenBottle(home, SLUG);
    writeMeta({ ...readMeta(SLUG, env)!, status: 'running' }, env);
    const p = bottlePaths(SLUG, env);
    mkdirSync(p.proxy, { recursive: true });
    mkdirSync(p.state, { recursive: true });
    writeFileSync(join(p.proxy, 'rules.json'), OLD);
    writeFileSync(join(p.proxy, 'routes.json'), '{"routes":[]}');
  });
  afterEach(() => rmSync(home, { recursive: true, force: true }));

  it('applies once the gate says its generation took', async () => {
    const p = bottlePaths(SLUG, env);
    // The gate: sees the generation, reloads, says so.
    const gate = setInterval(() => {
      try {
        const generation = readFileSync(join(p.proxy, 'generation'), 'utf8');
        writeFileSync(
          join(p.state, 'proxy-status.json'),
          JSON.stringify({ generation, rules: 'ok', routes: 'ok', at: new Date().toISOString() }),
        );
      } catch {}
    }, 10);
    try {
      const out = await reloadBottleProxies(SLUG, 'allowlist', NEW, 'turn', {
        env,
        gateWatches: true,
      });
      expect(out).toMatchObject({ ok: true });
      expect(readFileSync(join(p.proxy, 'rules.json'), 'utf8')).toBe(NEW);
      expect(readFileSync(join(p.currentConfig, 'allowlist.json'), 'utf8')).toBe(NEW);
    } finally {
      clearInterval(gate);
    }
  });

  it('undoes a reload the gate never confirmed, and refuses a secret the gate does not hold', async () => {
    const p = bottlePaths(SLUG, env);
    await expect(
      reloadBottleProxies(SLUG, 'allowlist', NEW, 'turn', {
        env,
        gateWatches: true,
        reloadTimeoutMs: 200,
      }),
    ).rejects.toThrow(/did not confirm the reload/);
    // Not left in force while the desk records it as failed.
    expect(readFileSync(join(p.proxy, 'rules.json'), 'utf8')).toBe(OLD);
    const routes = JSON.stringify({
      routes: [
        { prefix: '/svc', upstream: 'https://api.example.org/', headers: { k: 'env:SVC_KEY' } },
      ],
    });
    const out = await reloadBottleProxies(SLUG, 'routes', routes, 'turn', {
      env: { ...env, SVC_KEY: 'sk-not-for-the-gate' },
      gateWatches: true,
    });
    expect(out.ok).toBe(false);
    expect(out.detail).toMatch(/SVC_KEY would be new to watch-a1's gate/);
    expect(out.detail).not.toContain('sk-not-for-the-gate');
    expect(readFileSync(join(p.proxy, 'routes.json'), 'utf8')).toBe('{"routes":[]}');
  });
});
