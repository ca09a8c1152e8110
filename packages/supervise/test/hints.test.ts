// A supervised bottle's bash (BASH_ENV) says which tool asks for a missing command,
// and fails it as bash would: run by the real bash.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { COMMAND_NOT_FOUND_HINT } from '../src/index';

const dir = mkdtempSync(join(tmpdir(), 'bb-hints-'));
const file = join(dir, 'bb-hints.sh');
writeFileSync(file, COMMAND_NOT_FOUND_HINT);
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const bash = (args: string[]) =>
  spawnSync('bash', args, {
    env: {
      PATH: process.env['PATH'],
      HOME: dir,
      BASH_ENV: file,
      BB_SUPERVISE: 'node /opt/bb/bb-supervise.mjs',
    },
    // Not a socket: a bash whose input is one takes itself for a remote shell and reads
    // ~/.bashrc instead of BASH_ENV (Debian's build).
    stdio: ['ignore', 'pipe', 'pipe'],
    encoding: 'utf8',
  });

describe('the command-not-found hint', () => {
  it.each([
    ['bash -c', ['-c', 'bb-no-such-tool-7 --version']],
    ['bash -lc', ['-lc', 'bb-no-such-tool-7 --version']],
  ])('%s: a missing command exits 127 and names capability-block', (_, args) => {
    const r = bash(args);
    expect(r.status).toBe(127);
    expect(r.stderr).toMatch(/command not found/);
    expect(r.stderr).toContain('capability-block');
    expect(r.stderr).toContain('/etc/bot-bottle/current-config/Dockerfile');
  });

  it('changes nothing for a command that is there', () => {
    const r = bash(['-c', 'echo fine']);
    expect([r.status, r.stdout, r.stderr]).toEqual([0, 'fine\n', '']);
  });
});
