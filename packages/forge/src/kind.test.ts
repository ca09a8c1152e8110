import { isBbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import type { GiteaForge } from './gitea/gitea-forge';
import { giteaKind } from './gitea/kind';
import { checkBottleBranch, checkSiteEnv, defaultBottleBranches, ForgeKindRegistry } from './kind';

const refused = (fn: () => unknown): string => {
  try {
    fn();
  } catch (err) {
    if (isBbError(err, 'INVALID_INPUT')) return err.message;
    throw err;
  }
  return 'accepted';
};

describe('forge kinds', () => {
  it("lets a site's variables through to a bottle only when they are the kind's own", () => {
    expect(refused(() => checkSiteEnv('gitea', { FORGE_GITEA_API: 'http://g/api/v1' }))).toBe(
      'accepted',
    );
    expect(refused(() => checkSiteEnv('my-hub', { FORGE_MY_HUB_URL: 'https://h' }))).toBe(
      'accepted',
    );
    const bads: Array<Record<string, string>> = [
      { NODE_OPTIONS: '--import /workspace/x.mjs' },
      { PATH: '/workspace/bin' },
      { FORGE_TOKEN_FILE: '/workspace/token' },
      { FORGE_KIND_MODULE: '/workspace/kind.mjs' },
      { BB_SOCKET_OWNER: '0:0' },
      { FORGE_GITEAX: 'x' },
      { FORGE_GITEA_API: 'http://g\nNODE_OPTIONS=x' },
    ];
    for (const bad of bads)
      expect(refused(() => checkSiteEnv('gitea', bad))).toMatch(/site variable|one line/);
    // The built-in kind's own site passes its own check.
    const site = giteaKind.fromEnv({ FORGE_GITEA_API: 'http://g/api/v1' });
    expect(refused(() => checkSiteEnv('gitea', site.env()))).toBe('accepted');
  });

  it('takes the HTTP client from BB_FORGE_HTTP_CLIENT and refuses one it does not have', () => {
    const api = { FORGE_GITEA_API: 'http://g/api/v1' };
    const node = giteaKind.fromEnv({ ...api, BB_FORGE_HTTP_CLIENT: 'node' });
    expect((node.forgeFor({ owner: 'o', repo: 'r' }) as GiteaForge).client.transport).toBe('node');
    const plain = giteaKind.fromEnv(api).forgeFor({ owner: 'o', repo: 'r' }) as GiteaForge;
    expect(plain.client.transport).toBe('undici');
    expect(node.env()).toEqual(api); // not a site variable: the gate sets it itself
    expect(refused(() => giteaKind.fromEnv({ ...api, BB_FORGE_HTTP_CLIENT: 'curl' }))).toMatch(
      /BB_FORGE_HTTP_CLIENT "curl" must be undici or node/,
    );
  });

  it('refuses a bottle branch convention that does not lead back to its issue', () => {
    expect(checkBottleBranch(giteaKind, 'implementer', 17)).toBe('bb/implementer-17');
    const shared = { ...giteaKind, bottleBranch: () => 'bb/shared', issueOfBranch: () => 1 };
    expect(refused(() => checkBottleBranch(shared, 'implementer', 2))).toMatch(
      /does not lead back to that issue/,
    );
    const odd = { ...giteaKind, bottleBranch: () => '-x', issueOfBranch: () => 3 };
    expect(refused(() => checkBottleBranch(odd, 'implementer', 3))).toMatch(/does not lead back/);
    expect(defaultBottleBranches.issueOfBranch('bb/implementer-17/x')).toBeUndefined();
  });

  it('names the kinds it knows, and refuses a second kind under a taken name', () => {
    const r = new ForgeKindRegistry('gitea');
    r.register(giteaKind);
    expect(refused(() => r.get('github'))).toMatch(/use one of gitea/);
    expect(() => r.register({ ...giteaKind })).toThrow(/registered already/);
    expect(refused(() => r.register({ ...giteaKind, name: 'Git Hub' }))).toMatch(/lower-case/);
    expect(r.fromEnv({ FORGE_GITEA_API: 'http://g/api/v1' }).kind).toBe(giteaKind);
    // A kind made again (a second serve() in one process) may take its old place;
    // a built-in one never is replaced.
    const mine = {
      ...giteaKind,
      name: 'mine',
      webhook: { ...giteaKind.webhook, path: '/webhooks/mine' },
    };
    r.register(mine);
    const again = { ...mine };
    expect(() => r.register(again)).toThrow(/registered already/);
    r.register(again, { replace: true });
    expect(r.get('mine')).toBe(again);
    r.seal();
    expect(() => r.register({ ...giteaKind }, { replace: true })).toThrow(/registered already/);
    // Deliveries come under /webhooks/, never on the dashboard's or the APIs' paths.
    for (const path of ['/healthz', '/api/bottles', '/', 'webhooks/x'])
      expect(
        refused(() => r.register({ ...mine, name: 'odd', webhook: { ...mine.webhook, path } })),
      ).toMatch(/must be \/webhooks\/<name>/);
  });
});
