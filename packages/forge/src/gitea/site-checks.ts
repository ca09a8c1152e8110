import type { RepoName, SiteCheck } from '../kind';
import type { GiteaClient } from './client';

/** The scopes the bot's token needs (a `write:` scope includes its `read:`). */
export const NEEDED_SCOPES = ['write:repository', 'write:issue', 'read:organization', 'read:user'];

/**
 * Which scopes the token has, asked of the live API: a request outside a
 * scoped token's scopes is refused with a message that lists them, so one
 * call the bot never needs (notifications) tells them all.
 */
export async function scopeCheck(client: GiteaClient): Promise<SiteCheck> {
  let scopes: string[] | undefined;
  // Taken as an answer (not an error) so Gitea's message is read as it is.
  const res = await client.request<{ message?: string } | null>(
    { method: 'GET', path: '/notifications', query: { limit: 1 } },
    [200, 204, 403, 404],
  );
  if (res.status === 403) {
    const m = /token scope=([\w:,-]*)/.exec(res.body?.message ?? '');
    if (!m)
      return {
        check: 'token scopes',
        ok: false,
        detail: `Gitea refused: ${res.body?.message ?? '403'}`,
        fix: 'check the token (docs/gitea-setup.md)',
      };
    scopes = m[1]!.split(',').filter(Boolean);
  }
  if (!scopes || scopes.includes('all'))
    return { check: 'token scopes', ok: true, detail: 'the token is not limited to scopes' };
  const has = (need: string) => {
    const [level, what] = need.split(':');
    return scopes!.includes(need) || (level === 'read' && scopes!.includes(`write:${what}`));
  };
  const missing = NEEDED_SCOPES.filter((n) => !has(n));
  return missing.length === 0
    ? { check: 'token scopes', ok: true, detail: `the token has ${scopes.join(', ')}` }
    : {
        check: 'token scopes',
        ok: false,
        detail: `the token lacks ${missing.join(', ')} (it has ${scopes.join(', ') || 'none'})`,
        fix: `create a token with ${NEEDED_SCOPES.join(', ')} (docs/gitea-setup.md)`,
      };
}

/**
 * Whether the bot administers the repositories it works in: Gitea tells only
 * an admin who else may write, which decides whose comments drive an agent.
 */
export async function adminCheck(
  client: GiteaClient,
  me: string,
  named: readonly RepoName[],
): Promise<SiteCheck> {
  let repos = named.filter((r) => r.repo !== '*');
  if (repos.length === 0) {
    const { body } = await client.request<Array<{ name: string; owner: { login: string } }>>({
      method: 'GET',
      path: '/user/repos',
      query: { limit: 10 },
    });
    repos = (body ?? []).map((r) => ({ owner: r.owner.login, repo: r.name }));
  }
  if (repos.length === 0)
    return { check: 'repository admin', ok: null, detail: `${me} can reach no repository yet` };
  const notAdmin: string[] = [];
  for (const r of repos) {
    const { body } = await client.request<{ permission?: string }>({
      method: 'GET',
      path: `/repos/${encodeURIComponent(r.owner)}/${encodeURIComponent(r.repo)}/collaborators/${encodeURIComponent(me)}/permission`,
    });
    if (body.permission !== 'admin' && body.permission !== 'owner')
      notAdmin.push(`${r.owner}/${r.repo} (${body.permission ?? 'none'})`);
  }
  return notAdmin.length === 0
    ? {
        check: 'repository admin',
        ok: true,
        detail: `${me} administers ${repos.map((r) => `${r.owner}/${r.repo}`).join(', ')}`,
      }
    : {
        check: 'repository admin',
        ok: false,
        detail: `${me} does not administer ${notAdmin.join(', ')}: Gitea tells only an admin who may write, so there only members of the agent org drive agents`,
        fix: `make ${me} an admin collaborator of those repositories (docs/gitea-setup.md)`,
      };
}
