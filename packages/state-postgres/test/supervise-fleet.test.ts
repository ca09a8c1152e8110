// Two replicas' desks on one real PostgreSQL database (each its own connection pool):
// a request one replica took in from its bottle is listed by the other, decided there,
// and applied by the first, which runs the bottle; the agent's answer is written once.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultPolicy, Exchange, type Remediator, SuperviseDesk, sha256 } from '@bb/supervise';
import { sampleRequest } from '@bb/supervise/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresDatabase, PostgresSuperviseStore } from '../src/index';
import { postgresSkipReason, startPostgres, type TestPostgres } from '../src/testing';

const skipped = postgresSkipReason();
let server: TestPostgres | undefined;
beforeAll(async () => {
  if (!skipped) server = await startPostgres();
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

const BASE = '{"allow":["registry.npmjs.org"]}';
const WANT = '{"allow":["registry.npmjs.org","pypi.org"]}';

describe.skipIf(!!skipped)(
  `supervise across replicas on PostgreSQL${skipped ? ` (skipped: ${skipped})` : ''}`,
  () => {
    it('lists on one replica what the other took in, and only the replica running the bottle applies the decision', async () => {
      const root = mkdtempSync(join(tmpdir(), 'bb-supervise-fleet-'));
      const bottle = join(root, 'impl-1');
      mkdirSync(join(bottle, 'current-config'), { recursive: true });
      writeFileSync(join(bottle, 'current-config', 'allowlist.json'), BASE);
      const schema = `fleet_${process.pid}`;
      const dbs = [
        await PostgresDatabase.open({ url: server!.url, schema, max: 2 }),
        await PostgresDatabase.open({ url: server!.url, schema, max: 2 }),
      ];
      try {
        const applied: string[] = [];
        const desk = async (db: PostgresDatabase, runs: boolean, who: string) =>
          new SuperviseDesk({
            store: await PostgresSuperviseStore.open(db),
            bottles: {
              slugs: () => ['impl-1'],
              dir: () => bottle,
              turn: () => 1,
              allowedBases: () => [],
            },
            policy: { ...defaultPolicy(), egressCeiling: ['pypi.org'] },
            remediator: {
              reloadProxies: async (slug, _kind, text) => {
                applied.push(`${who}:${slug}`);
                writeFileSync(join(bottle, 'current-config', 'allowlist.json'), text);
                return { ok: true, detail: 'reloaded' };
              },
            } satisfies Remediator,
            appliesTo: () => runs,
          });
        const a = await desk(dbs[0]!, true, 'a');
        const b = await desk(dbs[1]!, false, 'b');
        const ex = new Exchange(join(bottle, 'supervise'));
        ex.ensure();
        const req = sampleRequest(1, {
          slug: 'impl-1',
          file: WANT,
          baseHash: sha256(BASE),
          candidateHash: sha256(WANT),
          createdAt: new Date().toISOString(),
          expiresAt: new Date(Date.now() + 3600_000).toISOString(),
        });
        ex.writeRequest(req);
        expect((await a.sync()).ingested).toEqual([req.id]);
        // Replica b lists it (it reads the database, not only its files), and decides it.
        expect((await b.list({ status: 'pending' })).map((r) => r.id)).toEqual([req.id]);
        expect((await b.approve(req.id, { by: 'bob', via: 'api' })).remediation).toBeNull();
        expect(applied).toEqual([]);
        expect(ex.decision(req.id)).toBeUndefined();
        // Replica a, which runs the bottle, applies it at its next sync; b never does.
        expect((await b.sync()).applied).toEqual([]);
        expect((await a.sync()).applied).toEqual([req.id]);
        expect((await a.sync()).applied).toEqual([]);
        expect(applied).toEqual(['a:impl-1']);
        expect(ex.decision(req.id)).toMatchObject({ status: 'approved', file: WANT });
        expect(await b.show(req.id)).toMatchObject({
          status: 'approved',
          decidedBy: 'bob',
          decidedVia: 'api',
          remediation: { ok: true, detail: 'reloaded' },
        });
      } finally {
        for (const db of dbs) await db.close();
        rmSync(root, { recursive: true, force: true });
      }
    });
  },
);
