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
    const t = { FORKLIFT_TOKEN: 't' };
    const refused: Array<[string[], Record<string, string>, string]> = [
      [['--timeout', 'soon'], {}, '--timeout soon is not a duration'],
      [['--agent', 'script', '--script', 'x.json'], {}, 'set FORKLIFT_TOKEN'],
      [['--agent', 'claude'], t, '--agent claude needs ANTHROPIC_API_KEY'],
      [['--agent', 'gpt'], t, 'use claude, codex, pi or script'],
      [['--agent', 'script'], t, 'needs --script FILE'],
      [['--agent', 'pi', '--script', 'x.json'], t, '--script is for --agent script'],
      [['--allow', '*.evil.test'], t, '--allow "*.evil.test" is not a host name'],
      [['--agent', 'script', '--script', 'x.json'], t, '--script /nonexistent/x.json'],
      [['--disk', '1k'], t, '--disk 1k is not a size of at least 16m'],
      [['sync'], {}, 'unexpected "sync"'],
    ];
    for (const [args, env, says] of refused)
      expect(await run(args, env), args.join(' ')).toMatchObject({
        code: 2,
        err: expect.stringContaining(says),
      });
  });
});
