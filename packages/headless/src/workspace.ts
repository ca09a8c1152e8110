import { BbError, redactString } from '@bb/errors';
import { runGit, wallGitEnv } from '@bb/wall';
import type { ForgeWiring } from './layout';

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
  onProgress?: ((message: string) => void) | undefined;
}

/**
 * Make a bottle's workspace before its agent first runs: the repository checked
 * out on the bottle's branch, with no remote (only the gate pushes) and the
 * agent's commit identity. The agent has not run yet: the repository is the
 * host's own until it does.
 */
export async function prepareWorkspace(o: WorkspaceOptions): Promise<void> {
  const git = (args: string[], config: Array<[string, string]> = []) =>
    runGit(args, { env: wallGitEnv({ config }), timeoutMs: o.timeoutMs });
  const ws = o.workspace;
  if (!o.forge) {
    await git(['init', '-q', '-b', o.branch, ws]);
    await git(['-C', ws, 'config', 'user.name', o.identity.name]);
    await git(['-C', ws, 'config', 'user.email', o.identity.email]);
    return;
  }
  const forge = o.forge;
  o.onProgress?.(`cloning ${forge.owner}/${forge.repo}`);
  const scheme = new URL(forge.cloneUrl).protocol.replace(':', '');
  // The clone's remote is removed at once: only the gate pushes. The commit
  // identity is set by the clone itself.
  await git(
    [
      'clone',
      '--quiet',
      '--no-tags',
      '--origin',
      'source',
      '--config',
      `user.name=${o.identity.name}`,
      '--config',
      `user.email=${o.identity.email}`,
      forge.cloneUrl,
      ws,
    ],
    [
      [`protocol.${scheme}.allow`, 'always'],
      // The forge's repository, not the agent's: its history is checked by the forge.
      ['transfer.fsckObjects', 'false'],
      ['http.lowSpeedLimit', '1000'],
      ['http.lowSpeedTime', String(Math.max(1, Math.min(60, Math.floor(o.timeoutMs / 2000))))],
      ['http.extraHeader', `Authorization: token ${forge.token}`],
    ],
  ).catch((err: Error) => {
    throw new BbError(
      'FORGE_UNAVAILABLE',
      `cannot clone ${forge.cloneUrl}: ${redactString(err.message)}`,
    );
  });
  await git(['-C', ws, 'remote', 'remove', 'source']);
  await git(['-C', ws, 'checkout', '-q', '-B', o.branch]);
}
