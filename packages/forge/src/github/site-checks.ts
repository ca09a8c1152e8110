/**
 * What `bb doctor` checks of a GitHub beyond "it answers": a token's scopes and admin
 * rights, or an App's permissions, events and installations; and the webhook.
 */
import type { RepoName, SiteCheck } from '../kind';
import { APP_PERMISSIONS, type GitHubApp } from './app';
import { type GitHubClient, gitHubClient } from './client';

/** The events the orchestrator acts on: what hooks are subscribed to, and an App must be. */
export const GITHUB_HOOK_EVENTS = [
  'issues',
  'issue_comment',
  'pull_request',
  'pull_request_review',
  'pull_request_review_comment',
];
/** The classic scopes a personal token needs (`repo` covers issues and PRs). */
export const NEEDED_SCOPES = ['repo', 'read:org'];
const HOOK_PATH = '/webhooks/github';

const rank = (l: string | undefined) =>
  l === 'admin' ? 3 : l === 'write' ? 2 : l === 'read' ? 1 : 0;
const message = (err: unknown) => (err as Error).message ?? String(err);
const name = (r: RepoName) => `${r.owner}/${r.repo}`;

/** Checks of a personal token (classic or fine-grained). */
export async function tokenChecks(
  apiUrl: string,
  token: string | undefined,
  named: readonly RepoName[],
): Promise<SiteCheck[]> {
  const client = gitHubClient({ apiUrl, token });
  const out: SiteCheck[] = [];
  const me = await client.rest.users.getAuthenticated();
  const header = me.headers['x-oauth-scopes'];
  if (header === undefined)
    out.push({
      check: 'token scopes',
      ok: true,
      detail:
        'a fine-grained token (or an installation token): its permissions are checked on each repository below',
    });
  else {
    const scopes = String(header)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const missing = NEEDED_SCOPES.filter(
      (n) => !scopes.includes(n) && !(n === 'read:org' && scopes.includes('admin:org')),
    );
    out.push(
      missing.length === 0
        ? { check: 'token scopes', ok: true, detail: `the token has ${scopes.join(', ')}` }
        : {
            check: 'token scopes',
            ok: false,
            detail: `the token lacks ${missing.join(', ')} (it has ${scopes.join(', ') || 'none'})`,
            fix: `make a token with ${NEEDED_SCOPES.join(', ')} (and admin:repo_hook for bb forge hook install), or a fine-grained one (docs/github-setup.md)`,
          },
    );
    if (missing.length) return out;
  }
  const repos = await reposToCheck(client, named);
  if (repos.length === 0) {
    out.push({
      check: 'repository admin',
      ok: null,
      detail: `${me.data.login} can reach no repository yet`,
    });
    return out;
  }
  // Only an admin is told who else may write: that decides whose comments drive an agent.
  const notAdmin: string[] = [];
  for (const r of repos) {
    try {
      const { data } = await client.rest.repos.getCollaboratorPermissionLevel({
        ...r,
        username: me.data.login,
      });
      if (data.permission !== 'admin') notAdmin.push(`${name(r)} (${data.permission})`);
    } catch (err) {
      notAdmin.push(`${name(r)} (${message(err)})`);
    }
  }
  out.push(
    notAdmin.length === 0
      ? {
          check: 'repository admin',
          ok: true,
          detail: `${me.data.login} administers ${repos.map(name).join(', ')}`,
        }
      : {
          check: 'repository admin',
          ok: false,
          detail: `${me.data.login} does not administer ${notAdmin.join(', ')}: GitHub tells only an admin who else may write`,
          fix: `make ${me.data.login} an admin of those repositories (or use a GitHub App: docs/github-setup.md)`,
        },
  );
  out.push(await repoHookCheck(client, named));
  return out;
}

/** Checks of a GitHub App: its installations' permissions and events, where it is installed, its webhook. */
export async function appChecks(app: GitHubApp, named: readonly RepoName[]): Promise<SiteCheck[]> {
  const out: SiteCheck[] = [];
  const problems: string[] = [];
  let installations: Array<{ id: number; account: string }> = [];
  try {
    installations = await app.installations();
  } catch (err) {
    return [
      {
        check: 'github app',
        ok: false,
        detail: message(err),
        fix: 'check FORGE_GITHUB_APP_ID and its key (docs/github-setup.md)',
      },
    ];
  }
  for (const i of installations) {
    let inst: Awaited<ReturnType<GitHubApp['installation']>>;
    try {
      inst = await app.installation(i.id);
    } catch (err) {
      problems.push(`installation ${i.id} cannot be read: ${message(err)}`);
      continue;
    }
    const lacks = Object.entries(APP_PERMISSIONS)
      .filter(([p, l]) => rank(inst.permissions[p]) < rank(l))
      .map(([p, l]) => `${p}: ${l}`);
    const deaf = GITHUB_HOOK_EVENTS.filter((e) => !inst.events.includes(e));
    if (lacks.length)
      problems.push(`installation ${i.id} (${inst.account}) lacks ${lacks.join(', ')}`);
    if (deaf.length)
      problems.push(
        `installation ${i.id} (${inst.account}) is not subscribed to ${deaf.join(', ')}`,
      );
  }
  out.push(
    installations.length === 0
      ? {
          check: 'github app',
          ok: false,
          detail: `GitHub App ${app.appId} is installed nowhere`,
          fix: 'install it on the org or repositories it should serve (docs/github-setup.md)',
        }
      : problems.length
        ? {
            check: 'github app',
            ok: false,
            detail: problems.join('; '),
            fix: `give the App ${Object.entries(APP_PERMISSIONS)
              .map(([p, l]) => `${p}: ${l}`)
              .join(
                ', ',
              )} and the events ${GITHUB_HOOK_EVENTS.join(', ')} on its settings page, then accept the new permissions on each installation`,
          }
        : {
            check: 'github app',
            ok: true,
            detail: `GitHub App ${app.appId} (${await app.login()}): ${installations.length} installation${installations.length === 1 ? '' : 's'} with the permissions and events needed`,
          },
  );
  const missing: string[] = [];
  for (const r of named)
    try {
      await app.installationFor(r.repo === '*' ? { owner: r.owner } : r);
    } catch {
      missing.push(r.repo === '*' ? r.owner : name(r));
    }
  if (named.length)
    out.push(
      missing.length
        ? {
            check: 'installed on',
            ok: false,
            detail: `the App is not installed on ${missing.join(', ')}`,
            fix: 'install it there from its public page (docs/github-setup.md)',
          }
        : {
            check: 'installed on',
            ok: true,
            detail: named.map((r) => (r.repo === '*' ? r.owner : name(r))).join(', '),
          },
    );
  try {
    const hook = await app.hookConfig();
    const ok =
      !!hook.url && new URL(hook.url).pathname.endsWith(HOOK_PATH) && hook.content_type === 'json';
    out.push(
      ok
        ? { check: 'webhook', ok: true, detail: `the App delivers to ${hook.url}` }
        : {
            check: 'webhook',
            ok: false,
            detail: hook.url
              ? `the App delivers to ${hook.url} (${hook.content_type ?? 'form'}), not to a bot-bottle's ${HOOK_PATH} as JSON`
              : 'the App has no webhook address',
            fix: `bb forge hook install --url https://<this orchestrator>${HOOK_PATH} (sets the App's webhook and secret)`,
          },
    );
  } catch (err) {
    out.push({ check: 'webhook', ok: false, detail: `cannot be read: ${message(err)}` });
  }
  return out;
}

/** The repositories named, or (none named) the first few the token reaches. */
async function reposToCheck(client: GitHubClient, named: readonly RepoName[]): Promise<RepoName[]> {
  const repos = named.filter((r) => r.repo !== '*');
  if (repos.length || named.length) return repos;
  const { data } = await client.rest.repos.listForAuthenticatedUser({ per_page: 10 });
  return data.map((r) => ({ owner: r.owner.login, repo: r.name }));
}

/** Each named repository (or org) has a hook delivering our events to a bot-bottle. */
async function repoHookCheck(client: GitHubClient, named: readonly RepoName[]): Promise<SiteCheck> {
  if (named.length === 0)
    return {
      check: 'webhook',
      ok: null,
      detail:
        'FORGE_REPOS is not set: which hooks to look for is not known (the REST sweep still finds work)',
    };
  const without: string[] = [];
  for (const r of named) {
    const where = r.repo === '*' ? r.owner : name(r);
    try {
      const hooks = (
        r.repo === '*'
          ? await client.request('GET /orgs/{org}/hooks', { org: r.owner })
          : await client.request('GET /repos/{owner}/{repo}/hooks', {
              owner: r.owner,
              repo: r.repo,
            })
      ).data as Array<{ active: boolean; events: string[]; config: { url?: string } }>;
      const ours = hooks.find(
        (h) =>
          h.active &&
          !!h.config.url &&
          new URL(h.config.url).pathname.endsWith(HOOK_PATH) &&
          GITHUB_HOOK_EVENTS.every((e) => h.events.includes(e) || h.events.includes('*')),
      );
      if (!ours) without.push(where);
    } catch (err) {
      without.push(`${where} (${message(err)})`);
    }
  }
  return without.length
    ? {
        check: 'webhook',
        ok: false,
        detail: `no active hook delivering ${GITHUB_HOOK_EVENTS.join(', ')} to ${HOOK_PATH} on ${without.join(', ')}`,
        fix: `bb forge hook install --repo <owner/repo> (or --org) --url https://<this orchestrator>${HOOK_PATH}`,
      }
    : {
        check: 'webhook',
        ok: true,
        detail: `hooked: ${named.map((r) => (r.repo === '*' ? r.owner : name(r))).join(', ')}`,
      };
}
