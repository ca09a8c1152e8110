// The token keeper on real files: a noted token near its end is replaced in the gate's
// secrets folder (whole, never half-written) by one for the bottle's own repository as its
// meta names it; one far from its end is left; a note whose gate is gone, or whose bottle
// no longer runs, is dropped; a renewal that fails leaves the old token and is tried again;
// a secrets folder that is not ours is never written.
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RepoName } from '@bb/forge';
import { afterEach, describe, expect, it } from 'vitest';
import { bottlePaths } from './layout';
import { secretsDir, writeSecret } from './secrets';
import { noteExpiringToken, startTokenKeeper } from './token-keeper';

describe('the token keeper', () => {
  const root = mkdtempSync(join(tmpdir(), 'bb-keeper-'));
  const env = { BB_RUN_DIR: join(root, 'run'), BB_HOME: join(root, 'home') };
  afterEach(() => rmSync(env.BB_RUN_DIR, { recursive: true, force: true }));

  const asked: RepoName[] = [];
  let fail = false;
  let n = 0;
  const credentials = {
    describe: 'a test App',
    bottleToken: async (t: RepoName) => {
      asked.push(t);
      if (fail) throw new Error('GitHub is down');
      return { token: `ghs_renewed_${++n}`, expiresAt: new Date(Date.now() + 60 * 60_000) };
    },
  };
  const gate = (slug: string, expiresInMs: number, status = 'running') => {
    writeSecret(slug, 'gate', 'token', 'ghs_first', env);
    const meta = bottlePaths(slug, env).meta;
    mkdirSync(join(meta, '..'), { recursive: true });
    writeFileSync(
      meta,
      JSON.stringify({
        slug,
        status,
        forge: { kind: 'github', site: {}, owner: 'acme', repo: slug, issue: 1 },
      }),
    );
    noteExpiringToken(slug, new Date(Date.now() + expiresInMs), env);
  };
  const tokenOf = (slug: string) =>
    readFileSync(join(secretsDir(slug, 'gate', env), 'token'), 'utf8');

  it('renews what is due, leaves what is not, forgets gates that are gone', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const keeper = startTokenKeeper({ env, credentials, log: (l) => lines.push(l) });
    try {
      gate('due', 5 * 60_000);
      gate('fresh', 50 * 60_000);
      gate('gone', 1_000);
      rmSync(secretsDir('gone', 'gate', env), { recursive: true });
      gate('frozen', 1_000, 'frozen');
      // The note a second time does not move it (a warm gate keeps the token it has).
      noteExpiringToken('fresh', new Date(Date.now() + 1_000), env);

      expect(await keeper.sweep()).toEqual(['due']);
      expect(tokenOf('due')).toBe('ghs_renewed_1');
      expect(tokenOf('fresh')).toBe('ghs_first');
      expect(asked).toEqual([{ owner: 'acme', repo: 'due' }]);
      // Nothing half-written is left beside it, and the gate cannot see the note.
      expect(readdirSync(secretsDir('due', 'gate', env))).toEqual(['token']);
      expect(existsSync(join(env.BB_RUN_DIR, 'gone', 'token.renew'))).toBe(false);
      expect(existsSync(join(env.BB_RUN_DIR, 'frozen', 'token.renew'))).toBe(false);
      expect(tokenOf('frozen')).toBe('ghs_first');
      // Renewed for an hour: not due again.
      expect(await keeper.sweep()).toEqual([]);
      expect(JSON.stringify(lines)).not.toContain('ghs_renewed_1');

      fail = true;
      gate('flaky', 1_000);
      expect(await keeper.sweep()).toEqual([]);
      expect(tokenOf('flaky')).toBe('ghs_first');
      expect(lines.at(-1)).toMatchObject({ msg: 'forge token renewal failed', slug: 'flaky' });
      fail = false;
      expect(await keeper.sweep()).toEqual(['flaky']);

      // A gate folder someone else may write (or a link in its place) is not written.
      gate('open', 1_000);
      chmodSync(secretsDir('open', 'gate', env), 0o777);
      gate('linked', 1_000);
      rmSync(secretsDir('linked', 'gate', env), { recursive: true });
      symlinkSync(secretsDir('open', 'gate', env), secretsDir('linked', 'gate', env));
      expect(await keeper.sweep()).toEqual([]);
      expect(tokenOf('open')).toBe('ghs_first');
      expect(
        lines.filter((l) => l['msg'] === 'forge token renewal failed').map((l) => l['slug']),
      ).toContain('linked');
    } finally {
      keeper.close();
    }
  });
});
