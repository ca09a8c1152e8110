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
    expect(await run(['--agent', 'script', '--script', 'x.json'])).toMatchObject({
      code: 2,
      err: expect.stringContaining('set FORKLIFT_TOKEN'),
    });
    const t = { FORKLIFT_TOKEN: 't' };
    expect(await run(['--agent', 'claude'], t)).toMatchObject({
      code: 2,
      err: expect.stringContaining('--agent claude needs ANTHROPIC_API_KEY'),
    });
    expect(await run(['--agent', 'gpt'], t)).toMatchObject({
      code: 2,
      err: expect.stringContaining('use claude, codex, pi or script'),
    });
    expect(await run(['--agent', 'script'], t)).toMatchObject({
      code: 2,
      err: expect.stringContaining('needs --script FILE'),
    });
    expect(await run(['--agent', 'pi', '--script', 'x.json'], t)).toMatchObject({
      code: 2,
      err: expect.stringContaining('--script is for --agent script'),
    });
    expect(await run(['--allow', '*.evil.test'], t)).toMatchObject({
      code: 2,
      err: expect.stringContaining('--allow "*.evil.test" is not a host name'),
    });
    expect(await run(['--agent', 'script', '--script', 'x.json'], t)).toMatchObject({
      code: 2,
      err: expect.stringContaining('--script /nonexistent/x.json'),
    });
    expect(await run(['--disk', '1k'], { FORKLIFT_TOKEN: 't' })).toMatchObject({
      code: 2,
      err: expect.stringContaining('--disk 1k is not a size of at least 16m'),
    });
    expect(await run(['sync'])).toMatchObject({
      code: 2,
      err: expect.stringContaining('unexpected "sync"'),
    });
  });
});
