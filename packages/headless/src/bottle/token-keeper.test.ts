// The token keeper on real files: a noted token near its end is replaced in the gate's
// secrets folder (whole, never half-written), one far from it is left, a note whose gate
// is gone is dropped, and a renewal that fails leaves the old token and is tried again.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RepoName } from '@bb/forge';
import { afterEach, describe, expect, it } from 'vitest';
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
  const gate = (slug: string, expiresInMs: number) => {
    writeSecret(slug, 'gate', 'token', 'ghs_first', env);
    noteExpiringToken(slug, { owner: 'acme', repo: slug }, new Date(Date.now() + expiresInMs), env);
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

      expect(await keeper.sweep()).toEqual(['due']);
      expect(tokenOf('due')).toBe('ghs_renewed_1');
      expect(tokenOf('fresh')).toBe('ghs_first');
      expect(asked).toEqual([{ owner: 'acme', repo: 'due' }]);
      // Nothing half-written is left beside it, and the gate cannot see the note.
      expect(readdirSync(secretsDir('due', 'gate', env))).toEqual(['token']);
      expect(existsSync(join(env.BB_RUN_DIR, 'gone', 'token.renew'))).toBe(false);
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
    } finally {
      keeper.close();
    }
  });
});
