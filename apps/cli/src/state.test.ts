// bb state migrate: a real SQLite install copied into a real PostgreSQL server
// (started here), then read back through the PostgreSQL stores.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ProvenanceStore, signRecord, verifyChain } from '@bb/provenance';
import { sampleRecord, testSigningKey } from '@bb/provenance/testing';
import { BbDatabase, SqliteForgeStateStore, SqliteLeaseStore } from '@bb/state';
import { sampleState } from '@bb/state/testing';
import { openPostgresState, PostgresDatabase, redactUrl } from '@bb/state-postgres';
import { postgresSkipReason, startPostgres, type TestPostgres } from '@bb/state-postgres/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT, runCli } from './cli';
import { captureIo as io } from './test-io';

// Missing PostgreSQL skips with the reason shown; under BB_REQUIRE_DOCKER=1 it fails instead.
const skipped = postgresSkipReason();

describe.skipIf(!!skipped)(
  `bb state migrate (real PostgreSQL)${skipped ? ` (skipped: ${skipped})` : ''}`,
  () => {
    let pg: TestPostgres;
    let home: string;
    beforeAll(async () => {
      pg = await startPostgres();
      home = mkdtempSync(join(tmpdir(), 'bb-migrate-'));
    }, 60_000);
    afterAll(async () => {
      await pg?.stop();
      if (home) rmSync(home, { recursive: true, force: true });
    });
    /** The server's URL with a password in it (trust auth ignores it), in a schema of its own. */
    const urlFor = (schema: string) =>
      pg.url.replace('postgres@', 'postgres:hunter2-secret@').concat(`?schema=${schema}`);

    it('copies bottles, history, ledger, inbox and run records; a second copy is refused; the password never shows', async () => {
      const file = join(home, 'bot-bottle.db');
      const db = BbDatabase.open({ path: file });
      const store = new SqliteForgeStateStore({ database: db });
      const runs = new ProvenanceStore(db);
      store.upsert(sampleState(1, { slug: 'live-1', prNumber: 11, status: 'frozen' }));
      store.upsert(sampleState(2, { slug: 'live-2' }));
      store.upsert(sampleState(3, { slug: 'gone-3', status: 'destroyed' }));
      store.recordDelivery('gitea:delivery-a', { deliveryId: 'uuid-a', event: 'issues' });
      const waiting = store.accept('gitea:acme/widgets:comment#9', {
        issue: 'acme/widgets#1',
        occurredAt: '2026-11-24T08:00:00Z',
        payload: { kind: 'comment_created', body: 'please go on' },
      });
      store.accept('bb:feedback:acme/widgets#2:x', {
        issue: null,
        occurredAt: '2026-11-24T08:01:00Z',
        payload: { message: 'no room' },
        done: true,
      });
      const key = testSigningKey();
      for (let turn = 1; turn <= 3; turn++)
        runs.append(signRecord(sampleRecord('live-1', turn, runs.head('live-1')), key));
      db.close();

      // A schema nothing else uses: created by the migration itself.
      const url = urlFor('migrated');
      // An orchestrator still at work on the file: refused, nothing copied.
      const live = BbDatabase.open({ path: file });
      new SqliteLeaseStore(live).claim('issue:acme/widgets#1', 'bb-1', 60_000);
      const busy = io({ BB_HOME: home, BB_DATABASE_URL: url });
      expect(await runCli(['state', 'migrate'], busy.io)).toBe(EXIT.FAILURE);
      expect(busy.err).toMatch(/an orchestrator \(bb-1\) is working on .*stop it first/);
      new SqliteLeaseStore(live).release('issue:acme/widgets#1', 'bb-1');
      live.close();
      // The URL from the environment (no password in argv).
      const t = io({ BB_HOME: home, BB_DATABASE_URL: url });
      const code = await runCli(['state', 'migrate'], t.io);
      expect(t.err + t.out).not.toContain('hunter2-secret');
      expect(code, t.err).toBe(EXIT.OK);
      expect(t.err).toMatch(/forge_state: 2 rows/);
      expect(t.err).toMatch(/provenance_records: 3 rows/);

      const target = await openPostgresState({ url });
      try {
        expect((await target.store.all()).map((r) => r.slug)).toEqual(['live-1', 'live-2']);
        expect(await target.store.findByPr('acme', 'widgets', 11)).toMatchObject({
          slug: 'live-1',
        });
        expect((await target.store.history()).map((r) => r.slug)).toEqual(['gone-3']);
        expect(await target.store.getDelivery('gitea:delivery-a')).toMatchObject({
          deliveryId: 'uuid-a',
        });
        // A delivery already seen before the move is still a duplicate after it.
        expect(await target.store.recordDelivery('gitea:acme/widgets:comment#9')).toBe(false);
        const open = await target.store.openEvents();
        expect(open).toEqual([waiting]);
        expect(await target.store.recentEvents('bb:feedback:', 5)).toHaveLength(1);
        // New events are numbered after the copied ones.
        const next = await target.store.accept('after-the-move', {
          issue: 'acme/widgets#2',
          occurredAt: '2026-11-24T09:00:00Z',
          payload: {},
        });
        expect(next!.id).toBeGreaterThan(waiting!.id + 1);
        const chain = await target.runs.chain('live-1');
        expect(chain).toHaveLength(3);
        expect(verifyChain(chain, key.publicKey).ok).toBe(true);
      } finally {
        await target.close();
      }

      // Again into the same (now full) database: refused, nothing changed.
      const again = io({ BB_HOME: home });
      expect(await runCli(['state', 'migrate', '--to', url], again.io)).toBe(EXIT.FAILURE);
      expect(again.err).toMatch(/already has rows in forge_state/);
      expect(again.err).not.toContain('hunter2-secret');
      const check = await PostgresDatabase.open({ url });
      try {
        const n = await check.query<{ n: string }>(
          'count',
          'SELECT count(*) AS n FROM event_inbox',
        );
        expect(Number(n.rows[0]!.n)).toBe(3);
      } finally {
        await check.close();
      }
    });

    it('says what is wrong with a bad URL, a missing file, or a missing --to', async () => {
      const bad = io({ BB_HOME: home });
      expect(await runCli(['state', 'migrate', '--to', 'mysql://x@y/z'], bad.io)).not.toBe(EXIT.OK);
      expect(bad.err).toMatch(/not a postgres:\/\/ URL/);
      const none = io({ BB_HOME: join(home, 'nowhere') });
      expect(await runCli(['state', 'migrate', '--to', pg.url], none.io)).toBe(EXIT.FAILURE);
      expect(none.err).toMatch(/no SQLite state at .*nowhere/);
      const usage = io({ BB_HOME: home });
      expect(await runCli(['state', 'migrate'], usage.io)).toBe(EXIT.USAGE);
      expect(usage.err).toMatch(/set BB_DATABASE_URL/);
      // Secrets in other URL parameters are never shown either.
      expect(redactUrl('postgres://bb:pw@db:5432/x?password=p2&sslpassword=p3&schema=s')).toBe(
        'postgres://bb@db:5432/x?schema=s',
      );
    });

    it("keeps operators' tokens in the fleet's database: one made through one replica's bb works on another", async () => {
      const url = urlFor('operators');
      const a = io({ BB_HOME: mkdtempSync(join(tmpdir(), 'bb-op-a-')), BB_DATABASE_URL: url });
      expect(await runCli(['operator', 'add', 'carol'], a.io)).toBe(EXIT.OK);
      const token = a.out.trim();
      // Another replica: its own BB_HOME, the same database.
      const other = await openPostgresState({ url });
      try {
        expect(await other.operators.verify(token)).toBe('carol');
        const b = io({ BB_HOME: mkdtempSync(join(tmpdir(), 'bb-op-b-')), BB_DATABASE_URL: url });
        expect(await runCli(['operator', 'list', '--json'], b.io)).toBe(EXIT.OK);
        expect((JSON.parse(b.out) as Array<{ name: string }>).map((o) => o.name)).toEqual([
          'carol',
        ]);
        expect(await runCli(['operator', 'revoke', 'carol'], b.io)).toBe(EXIT.OK);
        expect(await other.operators.verify(token)).toBeUndefined();
      } finally {
        await other.close();
      }
    });
  },
);
