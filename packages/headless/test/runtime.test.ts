// The runtime directory bottles mount: copied from the build once, not on every turn,
// and put right when a file in it is not the build's.
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { prepareRuntime } from '../src/bottle/runtime';

describe('prepareRuntime', () => {
  const home = mkdtempSync(join(tmpdir(), 'bb-runtime-'));
  const env = { BB_HOME: home };
  afterAll(() => rmSync(home, { recursive: true, force: true }));
  const inodes = (dir: string) =>
    Object.fromEntries(readdirSync(dir).map((f) => [f, statSync(join(dir, f)).ino]));

  it('copies the build once: a second call leaves every file as it was', () => {
    const dir = prepareRuntime(env);
    const first = inodes(dir);
    expect(Object.keys(first)).toEqual(
      expect.arrayContaining(['bb-gate.mjs', 'sidecar.mjs', 'script-agent.mjs', 'bb-waiter.mjs']),
    );
    expect(prepareRuntime(env)).toBe(dir);
    // Nothing written aside and renamed over: the same files, no leftovers.
    expect(inodes(dir)).toEqual(first);
  });

  it('puts back a file that is not the build’s', () => {
    const dir = prepareRuntime(env);
    const gate = join(dir, 'bb-gate.mjs');
    const size = statSync(gate).size;
    writeFileSync(gate, 'tampered');
    prepareRuntime(env);
    expect(statSync(gate).size).toBe(size);
  });
});
