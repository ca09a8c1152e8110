import { BbError, isBbError } from '@bb/errors';
import type { GitRemote } from '@bb/forge';
import { ensureBareRepo, importHead, runGit, wallGitEnv, withAlternates } from '@bb/wall';

/**
 * Where the sidecar's git work happens: a bare repository it owns (`repo`),
 * outside the agent's reach, into which the agent's commits are received as
 * objects and from which they are pushed. No git of the sidecar ever runs with
 * the agent's workspace as its repository.
 */
export interface GitGate {
  /** The agent's workspace (read-only to the sidecar; only its objects and HEAD are read). */
  readonly workspace: string;
  /** The sidecar's own bare repository. */
  readonly repo: string;
  /** Object stores it borrows, read-only (the repository's mirror): given to its gits. */
  readonly alternates: string[];
  /** @default 120000 */
  readonly timeoutMs?: number;
  /** Receive the commit the workspace's HEAD names into `repo`; returns its id. */
  receive(): Promise<string>;
}

export function createGitGate(options: {
  workspace: string;
  repo: string;
  timeoutMs?: number;
  /** The repository never grows past this. @default 16 GiB */
  maxRepoBytes?: number;
  /**
   * Object stores of ours `repo` borrows from, read-only, given to each git that
   * needs them (never written into `repo`): the repository's mirror the
   * workspace was checked out from (its history is not copied again).
   */
  alternates?: string[];
  /** Commits the alternates hold with their history (the launch's base): never walked again. */
  exclude?: string[] | (() => string[]);
}): GitGate {
  // One receive at a time: concurrent calls would share the repository's work.
  let queue: Promise<unknown> = Promise.resolve();
  const receive = async () => {
    try {
      return await importHead({
        workspace: options.workspace,
        into: options.repo,
        maxRepoBytes: options.maxRepoBytes ?? 16 * 1024 ** 3,
        exclude:
          typeof options.exclude === 'function' ? options.exclude() : (options.exclude ?? []),
        alternates: options.alternates ?? [],
        ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
      });
    } catch (err) {
      if (isBbError(err, 'UNSAFE_PATH') || isBbError(err, 'TOO_LARGE'))
        throw new BbError('INVALID_INPUT', `the workspace cannot be pushed: ${err.message}`);
      throw err;
    }
  };
  return {
    workspace: options.workspace,
    repo: options.repo,
    alternates: options.alternates ?? [],
    ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
    receive() {
      const next = queue.then(receive, receive);
      queue = next.catch(() => {});
      return next;
    },
  };
}

/**
 * The environment of a git that talks to the forge: the credential as protected
 * configuration (`http.extraHeader`, never argv or a URL), only http(s) allowed,
 * a low-speed limit so a stalled forge cannot hold it forever.
 */
export function forgeGitEnv(remote: GitRemote): NodeJS.ProcessEnv {
  const scheme = new URL(remote.url).protocol.replace(':', '');
  if (scheme !== 'https' && scheme !== 'http')
    throw new BbError('INVALID_INPUT', `the forge's git URL must be http(s), not ${scheme}`);
  return wallGitEnv({
    config: [
      [`protocol.${scheme}.allow`, 'always'],
      ['http.lowSpeedLimit', '1000'],
      ['http.lowSpeedTime', '60'],
      ...Object.entries(remote.headers).map(
        ([name, value]) => ['http.extraHeader', `${name}: ${value}`] as const,
      ),
    ],
  });
}

/** The remote's default branch (from its HEAD), or undefined when it cannot be read. */
export async function remoteDefaultBranch(
  gate: GitGate,
  remote: GitRemote,
): Promise<string | undefined> {
  try {
    ensureBareRepo(gate.repo);
    const out = await runGit(
      [`--git-dir=${gate.repo}`, 'ls-remote', '--symref', remote.url, 'HEAD'],
      { env: forgeGitEnv(remote), timeoutMs: gate.timeoutMs ?? 120_000 },
    );
    return /^ref: refs\/heads\/(\S+)\s+HEAD/m.exec(out)?.[1];
  } catch {
    return undefined;
  }
}

/**
 * Push `sha` (already received into the gate repository) to `branch` on the
 * remote: exactly one ref, the bottle's branch; no tags; never forced, so when
 * the branch has commits `sha` does not contain, the push is refused and
 * nothing there changes.
 */
export async function pushCommit(
  gate: GitGate,
  remote: GitRemote,
  sha: string,
  branch: string,
): Promise<void> {
  try {
    await runGit(
      [
        `--git-dir=${gate.repo}`,
        'push',
        '--porcelain',
        '--no-follow-tags',
        '--no-verify',
        remote.url,
        `${sha}:refs/heads/${branch}`,
      ],
      {
        env: withAlternates(forgeGitEnv(remote), gate.alternates),
        timeoutMs: gate.timeoutMs ?? 120_000,
      },
    );
  } catch (err) {
    if (isBbError(err)) throw err;
    const text = (err as Error).message;
    if (/non-fast-forward|fetch first|rejected/.test(text)) {
      throw new BbError(
        'CONFLICT',
        `the remote branch ${branch} has commits this workspace does not have; it was not overwritten`,
        { data: { branch } },
      );
    }
    // Unless it never reached the forge, the branch may have moved: the outcome is unknown.
    const neverSent =
      /Could not resolve host|Failed to connect|Connection refused|Couldn't connect/i.test(text);
    throw new BbError(
      'PUSH_FAILED',
      `git push to ${branch} failed: ${text.split('\n').slice(-3).join(' ')}`,
      { data: { branch, maybeSent: !neverSent } },
    );
  }
}
