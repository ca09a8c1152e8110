// Operators' own tokens: named, revocable, kept only as a hash, and what the
// service's door makes of them.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { giteaKind } from '@bb/forge';
import { BbDatabase, MemoryForgeStateStore } from '@bb/state';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from './app';
import { OPERATOR_TOKEN, OperatorTokens } from './operators';

describe('operator tokens', () => {
  let dir: string;
  let db: BbDatabase;
  let now = Date.parse('2026-12-01T10:00:00Z');
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'bb-operators-'));
    db = BbDatabase.open({ path: join(dir, 'bot-bottle.db') });
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  // What every store of tokens does is @bb/state's suite; here, what this file keeps.
  it('keeps a token only as its hash, nowhere in the database file or its journal', async () => {
    const tokens = new OperatorTokens(db, () => now);
    const carol = await tokens.add('carol');
    expect(carol).toMatch(OPERATOR_TOKEN);
    expect(await tokens.verify(carol)).toBe('carol');
    db.db.pragma('wal_checkpoint(TRUNCATE)');
    for (const f of ['bot-bottle.db', 'bot-bottle.db-wal'])
      try {
        expect(readFileSync(join(dir, f)).includes(carol)).toBe(false);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    now += 60_000;
    await tokens.verify(carol);
    expect((await tokens.list()).find((o) => o.name === 'carol')).toMatchObject({
      createdAt: '2026-12-01T10:00:00.000Z',
      lastUsedAt: '2026-12-01T10:01:00.000Z',
      revokedAt: null,
    });
  });

  it("lets an operator's token through the door on any address, naming them; a wrong or revoked one is refused even on loopback", async () => {
    const tokens = new OperatorTokens(db, () => now);
    const carol = await tokens.add('carol');
    const seen: Array<string | null> = [];
    const app = (loopback: boolean) =>
      createApp({
        webhook: {
          path: '/webhooks/gitea',
          handle: async () => new Response(null, { status: 202 }),
        },
        store: new MemoryForgeStateStore(),
        site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
        version: '0.0.0',
        access: { loopback, operator: (t) => tokens.verify(t) },
        supervise: async (req, caller) => {
          if (!new URL(req.url).pathname.startsWith('/api/supervise/')) return undefined;
          seen.push(caller.operator);
          return new Response('{}');
        },
      });
    const get = (a: ReturnType<typeof app>, headers: Record<string, string> = {}) =>
      a(new Request('http://10.1.2.3:8080/api/supervise/requests', { headers })).then(
        (r) => r.status,
      );
    expect(await get(app(false))).toBe(403);
    expect(await get(app(false), { authorization: `Bearer ${carol}` })).toBe(200);
    // A cookie is what a browser sends for any page: it never names an operator.
    expect(await get(app(false), { cookie: `bb_api_token=${carol}` })).toBe(403);
    const local = (h: Record<string, string>) =>
      app(true)(new Request('http://127.0.0.1:8080/api/supervise/requests', { headers: h })).then(
        (r) => r.status,
      );
    expect(await local({})).toBe(200);
    await tokens.revoke('carol');
    expect(await local({ authorization: `Bearer ${carol}` })).toBe(401);
    expect(seen).toEqual(['carol', null]);
  });
});
