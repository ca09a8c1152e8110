import { BbError } from '@bb/errors';

/** Where a remote lives: the forge's web base and the repository. */
export interface RemoteRepo {
  url: string;
  /** `https://gitea.example.com` */
  webBase: string;
  owner: string;
  repo: string;
}

/**
 * Read a remote URL (`https://host/owner/repo.git`, `http://…`, or
 * `git@host:owner/repo.git`) into where its repository lives. The forge's API is
 * taken to be `<webBase>/api/v1` (Gitea) unless `FORKLIFT_API` says otherwise.
 */
export function parseRemote(name: string, url: string): RemoteRepo {
  const trimmed = url.trim();
  const scp = /^[\w.-]+@([\w.-]+):([\w.-]+)\/([\w.-]+?)(?:\.git)?\/?$/.exec(trimmed);
  if (scp) return { url: trimmed, webBase: `https://${scp[1]}`, owner: scp[2]!, repo: scp[3]! };
  let u: URL;
  try {
    u = new URL(trimmed);
  } catch {
    throw new BbError(
      'INVALID_INPUT',
      `the ${name} remote (${trimmed}) is not a URL forklift can read: use https://host/owner/repo.git`,
    );
  }
  const parts = u.pathname
    .replace(/\.git\/?$/, '')
    .split('/')
    .filter(Boolean);
  if (parts.length < 2 || !['http:', 'https:', 'ssh:'].includes(u.protocol))
    throw new BbError('INVALID_INPUT', `the ${name} remote (${trimmed}) does not name owner/repo`);
  const prefix = parts.slice(0, -2).join('/');
  return {
    url: trimmed,
    webBase: `${u.protocol === 'ssh:' ? 'https:' : u.protocol}//${u.host}${prefix ? `/${prefix}` : ''}`,
    owner: parts.at(-2)!,
    repo: parts.at(-1)!,
  };
}
