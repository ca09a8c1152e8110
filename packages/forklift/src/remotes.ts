import { BbError } from '@bb/errors';
import { type Forge, forgeKinds } from '@bb/forge';

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

/**
 * The fork's forge from the kind registry: `FORKLIFT_FORGE_KIND` (else `FORGE_KIND`,
 * else the kind that owns the origin remote's host, `ForgeKind.ownsUrl`, else the
 * default kind). Its site is where `FORKLIFT_API` says (Gitea's API URL), else where
 * the origin remote's web base is (`siteAt`), else the kind's own variables.
 */
export function forkForge(o: { env: Record<string, string | undefined>; token: string }) {
  const name = o.env['FORKLIFT_FORGE_KIND'] || o.env['FORGE_KIND'];
  const named = name ? forgeKinds.get(name) : undefined;
  return (r: RemoteRepo): Forge => {
    const kind = named ?? forgeKinds.forUrl(r.webBase) ?? forgeKinds.get(forgeKinds.defaultKind);
    const api = o.env['FORKLIFT_API'];
    const site =
      api && kind.name === 'gitea'
        ? kind.fromEnv({ FORGE_GITEA_API: api })
        : !api && kind.siteAt
          ? kind.siteAt(r.webBase)
          : kind.fromEnv(o.env);
    return site.forgeFor({ owner: r.owner, repo: r.repo, token: o.token });
  };
}
