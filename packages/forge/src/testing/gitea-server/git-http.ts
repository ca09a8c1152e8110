/**
 * Git smart HTTP for a test server's world, as a forge serves it: clone for anyone, push
 * only with a user who may write (401 without one, 403 without the right), through the
 * real `git http-backend`, and the world told of what the push changed.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { GiteaWorld } from './world';

export async function serveGit(o: {
  world: GiteaWorld;
  req: IncomingMessage;
  res: ServerResponse;
  owner: string;
  name: string;
  /** `info/refs`, `git-upload-pack` or `git-receive-pack`. */
  what: string;
  url: URL;
  /** The request's user, already authenticated (null: none, or a bad credential). */
  user: string | null;
  /** The Basic realm a push without a user is asked for. */
  realm: string;
}): Promise<void> {
  const repo = o.world.repos.get(`${o.owner}/${o.name}`);
  if (!repo) {
    o.res.writeHead(404).end();
    return;
  }
  const push =
    o.what === 'git-receive-pack' || o.url.searchParams.get('service') === 'git-receive-pack';
  if (push && !o.user) {
    o.res.writeHead(401, { 'www-authenticate': `Basic realm="${o.realm}"` }).end();
    return;
  }
  if (push && o.user && !o.world.canWrite(repo, o.user)) {
    o.res.writeHead(403).end();
    return;
  }
  const git = o.world.git;
  const before = o.what === 'git-receive-pack' ? await git.branches(repo.gitDir) : undefined;
  await git.serveHttp(
    o.req,
    o.res,
    `/${o.owner}/${o.name}.git/${o.what}`,
    o.url.search.slice(1),
    o.user ?? undefined,
  );
  if (before && o.user) await o.world.afterPush(repo, before, o.user);
}
