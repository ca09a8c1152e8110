/** Whether someone is a member of a GitHub org, as GitHub answers it to one client. */
import { BbError } from '@bb/errors';
import { type GitHubClient, gitHubError } from './client';

/**
 * GitHub answers 204 (a member), 404 (not), or 302 to the public list when the client may
 * not see the org's members: that is "cannot tell", never a membership (a FORGE_ERROR
 * naming what would see them, said to `warn` too).
 */
export async function orgMembership(
  client: GitHubClient,
  org: string,
  login: string,
  warn: (message: string) => void,
): Promise<boolean> {
  try {
    const res = await client.request('GET /orgs/{org}/members/{username}', {
      org,
      username: login,
      request: { redirect: 'manual' },
    });
    if ((res.status as number) === 204) return true;
  } catch (err) {
    const status = (err as { status?: number }).status;
    if (status === 404) return false;
    if (status !== 302) throw gitHubError(err, `${login}'s membership of ${org}`);
  }
  const message = `cannot tell whether ${login} is a member of ${org}: GitHub redirected because the token may not see ${org}'s members; use a token of an ${org} member, or a GitHub App installed on ${org} with members: read`;
  warn(message);
  throw new BbError('FORGE_ERROR', message, { data: { org, user: login } });
}
