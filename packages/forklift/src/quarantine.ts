/**
 * What the agent (or the tests) wrote, kept where no git of the operator's reads it.
 * As root, the agent's files belong to its own uid, and git refuses to use a repository
 * of another user's ("dubious ownership"). Run as anyone else, the agent's files are
 * the operator's own: a `.git` in them (its config's fsmonitor, pager, aliases, hooks)
 * would run the agent's commands the moment the operator ran git there. So they are
 * kept as a tar archive instead, to be unpacked where no git runs.
 */
import { execFile } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { basename, dirname } from 'node:path';

const root = () => process.getuid?.() === 0;

/** `dir` as `dir.tar` when forklift is not root (the directory itself when it is); its path. */
export async function quarantine(dir: string): Promise<string> {
  if (root() || !existsSync(dir)) return dir;
  const tar = `${dir}.tar`;
  // tar stores links as links and follows none (no -h); the directory goes after.
  await runTar(['-C', dirname(dir), '-cf', tar, basename(dir)]);
  rmSync(dir, { recursive: true, force: true });
  return tar;
}

function runTar(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      'tar',
      args,
      { env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' }, timeout: 600_000 },
      (err) => (err ? reject(err) : resolve()),
    );
  });
}
