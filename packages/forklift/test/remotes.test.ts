import { describe, expect, it } from 'vitest';
import { FORKLIFT_USAGE, OUTCOMES, parseRemote, runForkliftCli, runsDir } from '../src/index';

describe('forklift without a forge', () => {
  it('reads https, http, ssh and scp-style remotes into owner/repo and the web base', () => {
    expect(parseRemote('origin', 'https://gitea.example.com/bob/widgets.git')).toMatchObject({
      webBase: 'https://gitea.example.com',
      owner: 'bob',
      repo: 'widgets',
    });
    expect(parseRemote('origin', 'http://127.0.0.1:3000/git/bob/widgets')).toMatchObject({
      webBase: 'http://127.0.0.1:3000/git',
      owner: 'bob',
      repo: 'widgets',
    });
    expect(parseRemote('upstream', 'git@gitea.example.com:acme/widgets.git')).toMatchObject({
      webBase: 'https://gitea.example.com',
      owner: 'acme',
      repo: 'widgets',
    });
    expect(() => parseRemote('upstream', 'not a url')).toThrow(
      /the upstream remote \(not a url\) is not a URL forklift can read/,
    );
    expect(() => parseRemote('origin', 'https://host/only')).toThrow(/does not name owner\/repo/);
  });

  it('keeps runs where XDG says, and documents every exit status it uses', () => {
    expect(runsDir({ XDG_STATE_HOME: '/var/state', HOME: '/home/x' })).toBe(
      '/var/state/forklift/runs',
    );
    expect(runsDir({ HOME: '/home/x' })).toBe('/home/x/.local/state/forklift/runs');
    for (const [outcome, code] of Object.entries(OUTCOMES))
      expect(FORKLIFT_USAGE, outcome).toContain(`${code} `);
  });

  it('refuses bad input with the reason and exit 2, before touching anything', async () => {
    const run = async (argv: string[], env: Record<string, string> = {}) => {
      let err = '';
      const code = await runForkliftCli(argv, {
        cwd: '/nonexistent',
        env,
        stdout: () => {},
        stderr: (s) => (err += s),
      });
      return { code, err };
    };
    expect(await run(['--timeout', 'soon'])).toMatchObject({
      code: 2,
      err: expect.stringContaining('--timeout soon is not a duration'),
    });
    expect(await run(['--agent', 'claude'])).toMatchObject({
      code: 2,
      err: expect.stringContaining('not wired to forklift yet'),
    });
    expect(await run(['--agent', 'script', '--script', 'x.json'])).toMatchObject({
      code: 2,
      err: expect.stringContaining('set FORKLIFT_TOKEN'),
    });
    expect(await run(['sync'])).toMatchObject({
      code: 2,
      err: expect.stringContaining('unexpected "sync"'),
    });
  });
});
