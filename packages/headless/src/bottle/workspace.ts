import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runGit, wallGitEnv } from '@bb/wall';
import type { ForgeWiring } from './layout';
import { syncMirror } from './mirror';

export interface WorkspaceOptions {
  /** Where the checkout goes (an empty directory on the bottle's disk). */
  workspace: string;
  /** The repository to check out; without one, an empty repository. */
  forge?: ForgeWiring | undefined;
  /** The bottle's branch, checked out. */
  branch: string;
  /** The commit identity the agent's commits carry. */
  identity: { name: string; email: string };
  /** How long the whole preparation may take. */
  timeoutMs: number;
  /** Where `BB_HOME` is (the repository's mirror lives under it). */
  env: Record<string, string | undefined>;
  /**
   * Where the agent finds the mirror's objects (a read-only mount), when not at
   * their host path: the checkout's alternates are pointed there once it is made.
   */
  mirrorInBottle?: string | undefined;
  onProgress?: ((message: string) => void) | undefined;
  /** The mirror's fetch, when the caller started it already (`syncMirror`). */
  synced?: Promise<{ dir: string; head: string | undefined }> | undefined;
  /**
   * The empty repository was made already, with this identity (`initWorkspace`, a
   * pooled bottle's): only its branch is named now.
   */
  initialized?: boolean | undefined;
}

/**
 * Make the empty repository a workspace starts from, with the agent's identity,
 * on a placeholder branch (a pooled bottle's, made before its issue names the
 * branch; `prepareWorkspace` with `initialized` names it).
 */
export async function initWorkspace(
  o: Pick<WorkspaceOptions, 'workspace' | 'identity' | 'timeoutMs'>,
  branch = 'bb/unbound',
): Promise<void> {
  const git = (args: string[]) =>
    runGit(args, { env: wallGitEnv({ config: [] }), timeoutMs: o.timeoutMs });
  await git(['init', '-q', '-b', branch, o.workspace]);
  await git(['-C', o.workspace, 'config', 'user.name', o.identity.name]);
  await git(['-C', o.workspace, 'config', 'user.email', o.identity.email]);
}

/**
 * Make a bottle's workspace before its agent first runs: the repository checked
 * out on the bottle's branch at the forge's default branch, with no remote
 * (only the gate pushes) and the agent's commit identity. The objects are the
 * repository's mirror's, borrowed read-only (`objects/info/alternates`): the
 * launch fetches what changed into the mirror and checks out from it. The agent
 * has not run yet: the repository is the host's own until it does. Returns the
 * mirror's directory (none without a forge).
 */
export async function prepareWorkspace(o: WorkspaceOptions): Promise<{ mirror?: string }> {
  const git = (args: string[]) =>
    runGit(args, { env: wallGitEnv({ config: [] }), timeoutMs: o.timeoutMs });
  const ws = o.workspace;
  const made = o.initialized
    ? // The host's own repository, never the agent's yet: its HEAD written as git would.
      Promise.resolve().then(() =>
        writeFileSync(join(ws, '.git', 'HEAD'), `ref: refs/heads/${o.branch}\n`),
      )
    : initWorkspace(o, o.branch);
  if (!o.forge) {
    await made;
    return {};
  }
  o.onProgress?.(`fetching ${o.forge.owner}/${o.forge.repo}`);
  // The mirror is fetched into while the empty checkout is made.
  const synced = o.synced ?? syncMirror(o.forge, o.env, o.timeoutMs);
  // Both settled before anything fails: no git is left writing the workspace.
  const [fetched, init] = await Promise.allSettled([synced, made]);
  if (fetched.status === 'rejected') throw fetched.reason;
  if (init.status === 'rejected') throw init.reason;
  const { dir, head } = fetched.value;
  const alternates = join(ws, '.git', 'objects', 'info', 'alternates');
  writeFileSync(alternates, `${join(dir, 'objects')}\n`);
  // An empty repository: the branch is born with the agent's first commit.
  if (head) {
    o.onProgress?.(`checking out ${o.forge.owner}/${o.forge.repo}`);
    await git(['-C', ws, 'reset', '-q', '--hard', head]);
  }
  if (o.mirrorInBottle) writeFileSync(alternates, `${o.mirrorInBottle}\n`);
  return { mirror: dir };
}
