import { describe, expect, it } from 'vitest';
import { EXIT, runCli } from './cli';

function io() {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    io: {
      env: {},
      cwd: '/',
      stdout: (t: string) => out.push(t),
      stderr: (t: string) => err.push(t),
    },
  };
}

describe('bb', () => {
  it('--help lists only what this build can do', async () => {
    const t = io();
    expect(await runCli(['--help'], t.io)).toBe(EXIT.OK);
    expect(t.out.join('')).toMatch(/Usage: bb <command>/);
    expect(t.out.join('')).toMatch(/no agent commands yet/);
  });

  it('an unknown command is a usage error with exit 2', async () => {
    const t = io();
    expect(await runCli(['launch-rockets'], t.io)).toBe(EXIT.USAGE);
    expect(t.err.join('')).toMatch(/unknown command "launch-rockets"/);
  });

  it('an unknown option is a usage error with exit 2', async () => {
    const t = io();
    expect(await runCli(['--frobnicate'], t.io)).toBe(EXIT.USAGE);
    expect(t.err.join('')).toMatch(/frobnicate/);
  });

  it('--version prints the package version', async () => {
    const t = io();
    expect(await runCli(['-v'], t.io)).toBe(EXIT.OK);
    expect(t.out.join('')).toMatch(/^\d+\.\d+\.\d+\n$/);
  });
});
