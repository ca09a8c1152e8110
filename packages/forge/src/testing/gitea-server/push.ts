import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One commit {@link pushCommit} makes and pushes. */
export interface PushCommitOptions {
  /** The repository's clone URL (no credentials in it). */
  cloneUrl: string;
  /** Who pushes: sent in an extra header, never in the URL. */
  token: string;
  /** Continued when it exists, made from the default branch when not. */
  branch: string;
  /** @default 'CHANGE.md' */
  file?: string;
  /** @default a line naming the branch and the time */
  content?: string;
  /** The commit's author name (their email is made from it). @default 'Alice' */
  author?: string;
  /** @default `Add <file>` */
  message?: string;
}

/**
 * Push one commit writing `file` to `branch`, as a person's git client would
 * over smart HTTP. Its id. Asynchronous throughout: the server answering may run
 * in this same process.
 */
export async function pushCommit(o: PushCommitOptions): Promise<string> {
  const file = o.file ?? 'CHANGE.md';
  const author = o.author ?? 'Alice';
  const dir = mkdtempSync(join(tmpdir(), 'bb-push-'));
  const env = { ...process.env, GIT_CONFIG_NOSYSTEM: '1', HOME: dir, GIT_TERMINAL_PROMPT: '0' };
  const w = join(dir, 'w');
  const git = async (cwd: string, ...args: string[]) =>
    (await run('git', args, { cwd, env })).stdout.trim();
  try {
    await git(dir, 'clone', '--quiet', o.cloneUrl, 'w');
    await git(w, 'checkout', '-q', '-B', o.branch, `origin/${o.branch}`).catch(() =>
      git(w, 'checkout', '-q', '-B', o.branch),
    );
    writeFileSync(join(w, file), o.content ?? `change on ${o.branch} at ${Date.now()}\n`);
    await git(w, 'add', file);
    const email = `${author.toLowerCase().replace(/\W+/g, '-')}@example.test`;
    const identity = ['-c', `user.name=${author}`, '-c', `user.email=${email}`];
    await git(w, ...identity, 'commit', '-q', '-m', o.message ?? `Add ${file}`);
    const auth = `http.extraHeader=Authorization: token ${o.token}`;
    await git(w, '-c', auth, 'push', '-q', 'origin', `HEAD:refs/heads/${o.branch}`);
    return await git(w, 'rev-parse', 'HEAD');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
