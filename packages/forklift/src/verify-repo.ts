/**
 * forklift's verification repository: a bare repository of the host's holding the
 * two published branches' objects and nothing else of the checkout. Borrowing the
 * checkout's store would let an agent's merge name a commit of the operator's that
 * was never published, and have it pass and be pushed (I10); and the token's git
 * never runs in a repository with someone's config or hooks.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { makeReaderRepo, runGit, wallGitEnv } from '@bb/wall';

/** A commit's name as people read it. */
export const short = (sha: string) => sha.slice(0, 12);

/** The identity of commits forklift itself makes (a clean merge, a record, a test variant). */
export const FORKLIFT_IDENTITY = {
  GIT_AUTHOR_NAME: 'forklift',
  GIT_AUTHOR_EMAIL: 'forklift@localhost',
  GIT_COMMITTER_NAME: 'forklift',
  GIT_COMMITTER_EMAIL: 'forklift@localhost',
};

/** Make it, copy `fork` and `upstream` into it (checked to be what was fetched), fix its attributes. */
export async function prepareVerifyRepo(o: {
  verify: string;
  /** The checkout's git directory. */
  gitDir: string;
  branch: string;
  fork: string;
  upstream: string;
}): Promise<void> {
  const git = (args: string[], config: Array<[string, string]> = []) =>
    runGit(['--git-dir', o.verify, ...args], { env: wallGitEnv({ config }), timeoutMs: 600_000 });
  makeReaderRepo(o.verify, []);
  await git(
    [
      'fetch',
      '--quiet',
      '--no-tags',
      '--no-write-fetch-head',
      o.gitDir,
      `+refs/remotes/origin/${o.branch}:refs/bb/fork`,
      `+refs/remotes/upstream/${o.branch}:refs/bb/upstream`,
    ],
    [['protocol.file.allow', 'always']],
  );
  for (const [ref, want] of [
    ['refs/bb/fork', o.fork],
    ['refs/bb/upstream', o.upstream],
  ] as const) {
    const got = (await git(['rev-parse', '--verify', `${ref}^{commit}`])).trim();
    if (got !== want)
      throw new BbError(
        'CONFLICT',
        `${ref.slice(8)} moved while forklift copied it (${short(want)} → ${short(got)}): run forklift again`,
      );
  }
  // A checkout for the tests takes nothing from the tree's attributes: the bytes tested are the bytes pushed.
  mkdirSync(join(o.verify, 'info'), { recursive: true });
  writeFileSync(
    join(o.verify, 'info', 'attributes'),
    '* -text -eol -ident -filter -working-tree-encoding\n',
  );
}
