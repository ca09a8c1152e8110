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

  it('makes a token per name, kept only as its hash, and tells whose a token is', () => {
    const tokens = new OperatorTokens(db, () => now);
    const carol = tokens.add('carol');
    expect(carol).toMatch(OPERATOR_TOKEN);
    expect(tokens.add('dan')).not.toBe(carol);
    expect(tokens.verify(carol)).toBe('carol');
    expect(tokens.verify(`${carol.slice(0, -1)}x`)).toBeUndefined();
    expect(tokens.verify('carol')).toBeUndefined();
    // Nowhere in the database file (nor its journal) is the token itself.
    db.db.pragma('wal_checkpoint(TRUNCATE)');
    for (const f of ['bot-bottle.db', 'bot-bottle.db-wal'])
      try {
        expect(readFileSync(join(dir, f)).includes(carol)).toBe(false);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    now += 60_000;
    tokens.verify(carol);
    expect(tokens.list().find((o) => o.name === 'carol')).toMatchObject({
      createdAt: '2026-12-01T10:00:00.000Z',
      lastUsedAt: '2026-12-01T10:01:00.000Z',
      revokedAt: null,
    });
  });

  it('revokes at once; a name has one live token; bad names are refused with the rule', () => {
    const tokens = new OperatorTokens(db, () => now);
    const first = tokens.add('carol');
    expect(() => tokens.add('carol')).toThrow(/has a token already: bb operator revoke carol/);
    tokens.revoke('carol');
    expect(tokens.verify(first)).toBeUndefined();
    expect(() => tokens.revoke('carol')).toThrow(/no operator "carol" with a live token/);
    const second = tokens.add('carol');
    expect(tokens.verify(second)).toBe('carol');
    expect(tokens.list().map((o) => [o.name, !!o.revokedAt])).toEqual([
      ['carol', true],
      ['carol', false],
    ]);
    for (const bad of ['', 'Carol', '-x', 'a b', 'x'.repeat(40), 'forge:alice'])
      expect(() => tokens.add(bad), bad).toThrow(/an operator's name is 1 to 39/);
  });

  it("lets an operator's token through the door on any address, naming them; a wrong or revoked one is refused even on loopback", async () => {
    const tokens = new OperatorTokens(db, () => now);
    const carol = tokens.add('carol');
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
    tokens.revoke('carol');
    expect(await local({ authorization: `Bearer ${carol}` })).toBe(401);
    expect(seen).toEqual(['carol', null]);
  });
});
