import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { BbError, redactString } from '@bb/errors';
import type { GitRemote } from '@bb/forge';

const run = promisify(execFile);

/**
 * Environment for a git that pushes with a credential. The credential travels
 * as configuration in the environment (GIT_CONFIG_COUNT/KEY/VALUE, git >= 2.31),
 * never in the URL or in argv, where other processes could read it.
 */
export function gitPushEnv(remote: GitRemote): NodeJS.ProcessEnv {
  const config: Array<[string, string]> = [['safe.directory', '*']];
  for (const [name, value] of Object.entries(remote.headers))
    config.push(['http.extraHeader', `${name}: ${value}`]);
  const env: NodeJS.ProcessEnv = {
    PATH: process.env['PATH'],
    HOME: process.env['HOME'] ?? '/tmp',
    GIT_TERMINAL_PROMPT: '0',
    GIT_ASKPASS: 'true',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_COUNT: String(config.length),
  };
  config.forEach(([k, v], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = k;
    env[`GIT_CONFIG_VALUE_${i}`] = v;
  });
  return env;
}

async function git(cwd: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  try {
    const { stdout } = await run('git', args, {
      cwd,
      env,
      maxBuffer: 16 * 1024 * 1024,
      timeout: 120_000,
    });
    return stdout.trim();
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw Object.assign(new Error(redactString((e.stderr || e.message).trim())), {
      gitStderr: redactString(e.stderr ?? ''),
    });
  }
}

/** The remote's default branch (from its HEAD), or undefined when it cannot be read. */
export async function remoteDefaultBranch(
  workspace: string,
  remote: GitRemote,
): Promise<string | undefined> {
  try {
    const out = await git(
      workspace,
      ['ls-remote', '--symref', remote.url, 'HEAD'],
      gitPushEnv(remote),
    );
    const m = /^ref: refs\/heads\/(\S+)\s+HEAD/m.exec(out);
    return m?.[1];
  } catch {
    return undefined;
  }
}

/**
 * Push the workspace's HEAD to `branch` on the remote. Never forces: when the
 * remote branch has commits the workspace lacks, the push is refused and
 * nothing there changes.
 */
export async function pushHead(
  workspace: string,
  remote: GitRemote,
  branch: string,
): Promise<{ sha: string }> {
  const env = gitPushEnv(remote);
  let sha: string;
  try {
    sha = await git(workspace, ['rev-parse', '--verify', 'HEAD^{commit}'], env);
  } catch {
    throw new BbError(
      'INVALID_INPUT',
      'the workspace has no commit to push: commit your work first',
    );
  }
  try {
    await git(workspace, ['push', '--porcelain', remote.url, `HEAD:refs/heads/${branch}`], env);
  } catch (err) {
    const text = (err as Error).message;
    if (/non-fast-forward|fetch first|rejected/.test(text)) {
      throw new BbError(
        'CONFLICT',
        `the remote branch ${branch} has commits this workspace does not have; it was not overwritten`,
        {
          data: { branch },
        },
      );
    }
    throw new BbError(
      'PUSH_FAILED',
      `git push to ${branch} failed: ${text.split('\n').slice(-3).join(' ')}`,
      { data: { branch } },
    );
  }
  return { sha };
}
