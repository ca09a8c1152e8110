// I2: the host never follows a path the agent controls. Between turns the host
// writes the agent's provider files into its home and sets ownership; the agent
// owns every name there and may have turned any of them into a symlink to a host
// file or directory.
import {
  chownSync,
  existsSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('red team: the host writes into the bottle', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());
  beforeEach(() => {
    // Each attack starts from the same host: the victim as the host made it, nothing planted.
    for (const f of readdirSync(rt.hostDir)) rmSync(join(rt.hostDir, f), { recursive: true });
    writeFileSync(victim(), 'host-original\n', { mode: 0o644 });
    chownSync(victim(), process.getuid?.() ?? 0, process.getgid?.() ?? 0);
  });
  const victim = () => join(rt.hostDir, 'victim.txt');
  const untouched = () => {
    expect(readFileSync(victim(), 'utf8')).toBe('host-original\n');
    expect(statSync(victim()).uid).toBe(process.getuid?.() ?? 0);
  };

  it('a provider file turned into a symlink to a host file is not written through', async () => {
    const run = await rt.launch([
      [{ do: 'sh', cmd: `ln -sf ${victim()} "$HOME/.bb/script.json"` }],
      [{ do: 'read_issue' }],
    ]);
    await rt.resume(run).catch(() => undefined);
    untouched();
  });

  it('a directory of the home turned into a symlink to a host directory is not written into', async () => {
    const before = readdirSync(rt.hostDir).sort();
    const run = await rt.launch([
      [{ do: 'sh', cmd: `rm -rf "$HOME/.bb" && ln -s ${rt.hostDir} "$HOME/.bb"` }],
      [{ do: 'read_issue' }],
    ]);
    await rt.resume(run).catch(() => undefined);
    expect(readdirSync(rt.hostDir).sort()).toEqual(before);
    untouched();
  });

  it('a dangling symlink where a provider file will go creates nothing on the host', async () => {
    const run = await rt.launch([
      [{ do: 'sh', cmd: `ln -sf ${join(rt.hostDir, 'planted.txt')} "$HOME/.bb/script.json"` }],
      [{ do: 'read_issue' }],
    ]);
    await rt.resume(run).catch(() => undefined);
    expect(existsSync(join(rt.hostDir, 'planted.txt'))).toBe(false);
  });

  it('ownership changes do not follow symlinks out of the bottle', async () => {
    const run = await rt.launch([
      [
        {
          do: 'sh',
          cmd: `ln -s ${victim()} /workspace/link && ln -s ${rt.hostDir} "$HOME/dirlink"`,
        },
      ],
      [{ do: 'read_issue' }],
    ]);
    await rt.resume(run).catch(() => undefined);
    untouched();
    expect(statSync(rt.hostDir).uid).toBe(process.getuid?.() ?? 0);
    expect((await rt.lstatWorkspace(run, 'link'))?.isSymbolicLink()).toBe(true);
  });
});
