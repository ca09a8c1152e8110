import { existsSync, readdirSync } from 'node:fs';
import { BbError, redactString } from '@bb/errors';
import { forgeSiteFromEnv, loadSidecarEnv, readSidecarToken } from '@bb/forge-sidecar';
import { runGit, wallGitEnv } from '@bb/wall';
import { forgeGitEnv } from './mirror';

/**
 * Clone a pod bottle's workspace at its launch (`bb-gate clone`, an init
 * container of the gate pod, run as the agent's user before any agent pod
 * exists): the repository the gate's variables name, with the forge kind's git
 * authentication as protected configuration (never argv, a URL or `.git/config`),
 * into `BB_WORKSPACE`, then made what a Docker bottle's workspace is: on the
 * bottle's branch (`BB_BRANCH`), with no remote (only the gate pushes) and the
 * agent's commit identity (`BB_GIT_NAME`, `BB_GIT_EMAIL`). A workspace that
 * holds anything is left as it is (the bottle was launched before); what the
 * agent leaves is never read by the clone. Returns the commit it checked out,
 * or undefined when it left the workspace.
 */
export async function cloneWorkspaceFromEnv(
  raw: Record<string, string | undefined>,
  timeoutMs = 600_000,
): Promise<string | undefined> {
  const env = loadSidecarEnv(raw);
  const dir = env.BB_WORKSPACE;
  if (!existsSync(dir))
    throw new BbError('NOT_FOUND', `the workspace ${dir} is not mounted: nothing to clone into`);
  if (readdirSync(dir).length > 0) return undefined;
  const site = await forgeSiteFromEnv(env, raw);
  const forge = {
    kind: env.FORGE_KIND ?? 'gitea',
    site: site.env(),
    token: readSidecarToken(env),
    owner: env.FORGE_OWNER,
    repo: env.FORGE_REPO,
    issue: env.FORGE_ISSUE_NUMBER,
    cloneUrl: site.cloneUrl({ owner: env.FORGE_OWNER, repo: env.FORGE_REPO }),
  };
  const gitEnv = forgeGitEnv(forge, timeoutMs);
  try {
    await runGit(['clone', '--quiet', forge.cloneUrl, dir], {
      env: gitEnv,
      timeoutMs,
    });
  } catch (err) {
    throw new BbError(
      'FORGE_UNAVAILABLE',
      `cannot clone ${forge.cloneUrl}: ${redactString((err as Error).message)}`,
    );
  }
  // The clone is this process's alone until it returns: plain git, no forge configuration.
  const git = (args: string[]) =>
    runGit(['-C', dir, ...args], { env: wallGitEnv({ config: [] }), timeoutMs: 30_000 });
  await git(['checkout', '-q', '-b', env.BB_BRANCH]);
  await git(['remote', 'remove', 'origin']);
  if (raw['BB_GIT_NAME']) await git(['config', 'user.name', raw['BB_GIT_NAME']]);
  if (raw['BB_GIT_EMAIL']) await git(['config', 'user.email', raw['BB_GIT_EMAIL']]);
  return (await git(['rev-parse', 'HEAD'])).trim();
}
