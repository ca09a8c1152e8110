import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbDatabase, SqliteFleetRoster } from '@bb/state';
import { afterEach, describe, expect, it } from 'vitest';
import { awaitAgreement, configHash, keepCheckingIn } from './fleet-config';

const dirs: string[] = [];
const temp = () => {
  const d = mkdtempSync(join(tmpdir(), 'bb-fleet-config-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const config = (root: string, agent = 'provider: anthropic\n') => {
  mkdirSync(join(root, 'agents'), { recursive: true });
  writeFileSync(join(root, 'agents', 'claude.yaml'), agent);
  writeFileSync(join(root, 'supervise.json'), '{}\n');
  return root;
};

describe("the fleet's configuration", () => {
  it('hashes by path and content; a ConfigMap mount hashes as the directory it stands for', () => {
    const a = config(temp());
    const b = config(temp());
    expect(configHash(a)).toBe(configHash(b));
    expect(configHash(config(temp(), 'provider: openai\n'))).not.toBe(configHash(a));
    // Dot-entries (an editor's, a ConfigMap's own) do not count.
    writeFileSync(join(b, '.swp'), 'x');
    expect(configHash(b)).toBe(configHash(a));
    // A ConfigMap volume: each entry a link into ..data, itself a link to a dated folder.
    const cm = temp();
    const dated = join(cm, '..2026_12_02');
    config(dated);
    symlinkSync('..2026_12_02', join(cm, '..data'));
    symlinkSync('..data/agents', join(cm, 'agents'));
    symlinkSync('..data/supervise.json', join(cm, 'supervise.json'));
    expect(configHash(cm)).toBe(configHash(a));
    // None at all: the empty configuration.
    expect(configHash(join(temp(), 'missing'))).toBe(configHash(temp()));
  });

  it('a replica whose configuration differs waits, says so once, and takes work once the fleet agrees', async () => {
    const db = BbDatabase.open({ path: join(temp(), 'bb.db') });
    const roster = new SqliteFleetRoster(db);
    const old = configHash(config(temp()));
    const changed = configHash(config(temp(), 'provider: openai\n'));
    roster.checkIn('bb-1', old, 60_000);
    const lines: Array<Record<string, unknown>> = [];
    const log = {
      info: (e: Record<string, unknown>) => lines.push(e),
      error: (e: Record<string, unknown>) => lines.push(e),
    };
    let agreed = false;
    const waiting = awaitAgreement({
      roster,
      replica: 'bb-2',
      hash: changed,
      ttlMs: 300,
      log,
    }).then(() => {
      agreed = true;
    });
    await new Promise((r) => setTimeout(r, 500));
    expect(agreed).toBe(false);
    const said = lines.filter((l) => String(l['msg']).includes('differs from the fleet'));
    expect(said).toHaveLength(1);
    expect(said[0]).toMatchObject({ replica: 'bb-2', ours: changed, fleet: old, first: 'bb-1' });
    // The one with the old configuration stops: the changed one is the fleet's now.
    roster.leave('bb-1');
    await waiting;
    expect(lines.at(-1)?.['msg']).toMatch(/agrees with the fleet now/);
    // One with the same configuration as the fleet's never waits.
    await awaitAgreement({ roster, replica: 'bb-3', hash: changed, ttlMs: 300, log });
    db.close();
  });

  it('keeps checking in, and a roster that fails at once (a full disk under SQLite) is logged, never fatal', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const log = {
      info: (e: Record<string, unknown>) => lines.push(e),
      error: (e: Record<string, unknown>) => lines.push(e),
    };
    let calls = 0;
    const roster = {
      checkIn: () => {
        calls++;
        throw new Error('database or disk is full (SQLITE_FULL)');
      },
      leave: () => {},
    };
    const stop = keepCheckingIn({ roster, replica: 'bb-1', hash: 'a'.repeat(64), ttlMs: 300, log });
    await new Promise((r) => setTimeout(r, 450));
    stop();
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(lines.some((l) => l['msg'] === 'could not check in to the fleet roster')).toBe(true);
  });
});
