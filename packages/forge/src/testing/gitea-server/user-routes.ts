/**
 * The test server's endpoints about the server and its people: its version,
 * the caller, a user, organisation membership, a repository.
 */
import { ApiError, type Route } from './api-core';
import { repoJson, userJson } from './shapes';

export const USER_ROUTES: Route[] = [
  {
    pattern: '/version',
    methods: ['GET'],
    otherMethods: 'next',
    handle: () => ({ body: { version: '1.26.3' } }),
  },
  {
    pattern: '/user',
    methods: ['GET'],
    otherMethods: 'next',
    handle: (core, req) => ({ body: userJson(core.base, core.user(req.needUser())) }),
  },
  {
    pattern: '/users/{username}',
    methods: ['GET'],
    otherMethods: 'next',
    handle(core, req) {
      const u = core.users.get(req.params['username']!);
      if (!u) throw new ApiError(404, core.notFound('GetUserByName'));
      return { body: userJson(core.base, u) };
    },
  },
  {
    pattern: '/orgs/{org}/members/{username}',
    methods: ['GET'],
    otherMethods: 'next',
    handle(core, req) {
      const caller = req.needUser();
      const { org: name, username } = req.params as { org: string; username: string };
      const org = core.orgs.get(name);
      if (!org) throw new ApiError(404, core.notFound('GetOrgByName'));
      if (!core.users.has(username)) throw new ApiError(404, core.notFound('GetUserByName'));
      // A member (or a site admin) is told; anyone else is sent to the public list.
      if (org.members.has(caller) || core.user(caller).isAdmin) {
        const member = org.members.has(username);
        return { status: member ? 204 : 404, body: member ? null : core.notFound() };
      }
      if (caller === username) return { status: 404, body: core.notFound() };
      return {
        status: 303,
        body: null,
        headers: { location: `/api/v1/orgs/${name}/public_members/${username}` },
      };
    },
  },
  {
    pattern: '/orgs/{org}/public_members/{username}',
    methods: ['GET'],
    otherMethods: 'next',
    handle(core, req) {
      const org = core.orgs.get(req.params['org']!);
      if (!org) throw new ApiError(404, core.notFound('GetOrgByName'));
      const member = org.publicMembers.has(req.params['username']!);
      return { status: member ? 204 : 404, body: member ? null : core.notFound() };
    },
  },
  {
    pattern: '/repos/{owner}/{repo}',
    methods: ['GET'],
    otherMethods: 'next',
    handle: (core, req) => ({ body: repoJson(core.ctx(req.repo())) }),
  },
];
