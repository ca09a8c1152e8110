import { conformanceSuite } from '@bb/state/testing';
import { expect } from 'vitest';
import type { RequestFile } from '../contract';
import type { IngestExtra, SuperviseRecords } from '../store';

const T0 = Date.parse('2026-12-01T10:00:00.000Z');
const at = (ms: number) => new Date(T0 + ms).toISOString();

/** A request as a sidecar writes it (id `sr_` and `n` in 20 digits): `n` orders them, `ttl` from its creation. */
export function sampleRequest(
  n: number,
  over: Partial<RequestFile> = {},
  ttlMs = 3600_000,
): RequestFile {
  return {
    id: `sr_${String(n).padStart(20, '0')}`,
    slug: 'impl-1',
    kind: 'allowlist',
    tool: 'pipelock-block',
    file: `{"allow":["h${n}.example.com"]}`,
    justification: `the tests need h${n}.example.com`,
    baseHash: 'b'.repeat(64),
    candidateHash: String(n).padStart(64, 'c'),
    createdAt: at(n * 1000),
    expiresAt: at(n * 1000 + ttlMs),
    ...over,
  } as RequestFile;
}

const EXTRA: IngestExtra = {
  base: '{"allow":[]}',
  evidence: [
    { time: at(0), kind: 'egress', host: 'h.example.com', port: 443, rule: 'not-allowed' },
  ],
  findings: [],
  turn: 2,
};

/** The behaviour every `SuperviseRecords` must have: one orchestrator's, or a fleet's. */
export const describeSuperviseRecords = conformanceSuite<SuperviseRecords>(
  'SuperviseRecords',
  ({ make, test }) => {
    test('a request is recorded once, with everything the desk took in', async () => {
      const s = await make();
      expect(await s.ingest(sampleRequest(1), EXTRA)).toBe(true);
      expect(await s.ingest(sampleRequest(1, { justification: 'again' }), EXTRA)).toBe(false);
      const r = await s.get('sr_00000000000000000001');
      expect(r).toMatchObject({
        id: 'sr_00000000000000000001',
        slug: 'impl-1',
        kind: 'allowlist',
        status: 'pending',
        turn: 2,
        base: EXTRA.base,
        candidate: sampleRequest(1).file,
        justification: 'the tests need h1.example.com',
        rerouted: false,
        evidence: EXTRA.evidence,
        findings: [],
        decidedBy: null,
        remediation: null,
        override: false,
      });
      expect(await s.get('sr_00000000000000009999')).toBeUndefined();
      expect([...(await s.known(['sr_00000000000000000001', 'sr_00000000000000009999']))]).toEqual([
        'sr_00000000000000000001',
      ]);
    });

    test('lists oldest first, by status and by bottle', async () => {
      const s = await make();
      await s.ingest(sampleRequest(3), EXTRA);
      await s.ingest(sampleRequest(1, { slug: 'other-1' }), EXTRA);
      await s.ingest(sampleRequest(2), EXTRA);
      expect((await s.list()).map((r) => r.id)).toEqual([
        'sr_00000000000000000001',
        'sr_00000000000000000002',
        'sr_00000000000000000003',
      ]);
      expect((await s.list({ slug: 'impl-1' })).map((r) => r.id)).toEqual([
        'sr_00000000000000000002',
        'sr_00000000000000000003',
      ]);
      await s.decide('sr_00000000000000000002', {
        status: 'rejected',
        by: 'alice',
        via: 'cli',
        at: at(5000),
        reason: 'no',
      });
      expect((await s.list({ slug: 'impl-1', status: 'pending' })).map((r) => r.id)).toEqual([
        'sr_00000000000000000003',
      ]);
    });

    test('only a pending request is decided; a second decision is refused and changes nothing', async () => {
      const s = await make();
      await s.ingest(sampleRequest(1), EXTRA);
      const final = { text: '{"allow":["x"]}', hash: 'f'.repeat(64) };
      expect(
        await s.decide('sr_00000000000000000001', {
          status: 'modified',
          by: 'alice',
          via: 'api',
          at: at(2000),
          scope: 'bottle',
          final,
          override: true,
        }),
      ).toBe(true);
      expect(
        await s.decide('sr_00000000000000000001', {
          status: 'rejected',
          by: 'bob',
          via: 'forge',
          at: at(3000),
          reason: 'no',
        }),
      ).toBe(false);
      expect(await s.get('sr_00000000000000000001')).toMatchObject({
        status: 'modified',
        decidedBy: 'alice',
        decidedVia: 'api',
        decidedAt: at(2000),
        scope: 'bottle',
        final: final.text,
        finalHash: final.hash,
        override: true,
        reason: null,
      });
      expect(
        await s.decide('sr_00000000000000009999', {
          status: 'cancelled',
          by: 'x',
          via: 'system',
          at: at(1),
          reason: 'r',
        }),
      ).toBe(false);
    });

    test('a decided request waits to be applied until its remediation is recorded, once', async () => {
      const s = await make();
      for (const n of [1, 2, 3]) await s.ingest(sampleRequest(n), EXTRA);
      await s.decide('sr_00000000000000000002', {
        status: 'approved',
        by: 'a',
        via: 'cli',
        at: at(5000),
        scope: 'turn',
      });
      await s.decide('sr_00000000000000000001', {
        status: 'modified',
        by: 'a',
        via: 'api',
        at: at(6000),
        scope: 'bottle',
      });
      await s.decide('sr_00000000000000000003', {
        status: 'rejected',
        by: 'a',
        via: 'cli',
        at: at(7000),
        reason: 'no',
      });
      expect((await s.unapplied()).map((r) => r.id)).toEqual([
        'sr_00000000000000000002',
        'sr_00000000000000000001',
      ]);
      expect(
        await s.recordRemediation(
          'sr_00000000000000000002',
          { ok: true, detail: 'reloaded' },
          at(8000),
        ),
      ).toBe(true);
      expect(
        await s.recordRemediation(
          'sr_00000000000000000002',
          { ok: false, detail: 'twice' },
          at(9000),
        ),
      ).toBe(false);
      expect(await s.get('sr_00000000000000000002')).toMatchObject({
        remediation: { ok: true, detail: 'reloaded' },
        remediatedAt: at(8000),
      });
      expect((await s.unapplied()).map((r) => r.id)).toEqual(['sr_00000000000000000001']);
    });

    test('one desk applies a decision: claimed with it or after it, until the claim goes stale', async () => {
      const s = await make();
      for (const n of [1, 2]) await s.ingest(sampleRequest(n), EXTRA);
      const stale = at(-1);
      // Claimed with the decision by desk a: b cannot take it, a can again.
      await s.decide(sampleRequest(1).id, {
        status: 'approved',
        by: 'op',
        via: 'cli',
        at: at(5000),
        applying: { by: 'a', at: at(5000) },
      });
      expect(await s.claimApply(sampleRequest(1).id, 'b', at(6000), stale)).toBe(false);
      expect(await s.claimApply(sampleRequest(1).id, 'a', at(6000), stale)).toBe(true);
      // Once a's claim is older than the stale mark (a died applying), b may take it.
      expect(await s.claimApply(sampleRequest(1).id, 'b', at(7000), at(6500))).toBe(true);
      expect(await s.claimApply(sampleRequest(1).id, 'a', at(7100), at(6500))).toBe(false);
      // Decided with no claim: the first to ask has it. Applied: nobody.
      await s.decide(sampleRequest(2).id, {
        status: 'modified',
        by: 'op',
        via: 'api',
        at: at(8000),
      });
      expect(await s.claimApply(sampleRequest(2).id, 'b', at(8100), stale)).toBe(true);
      expect(await s.claimApply(sampleRequest(2).id, 'c', at(8200), stale)).toBe(false);
      await s.recordRemediation(sampleRequest(2).id, { ok: true, detail: 'reloaded' }, at(8300));
      expect(await s.claimApply(sampleRequest(2).id, 'b', at(8400), at(9999_000))).toBe(false);
      // Never a pending, rejected or unknown one.
      await s.ingest(sampleRequest(3), EXTRA);
      expect(await s.claimApply(sampleRequest(3).id, 'a', at(9000), stale)).toBe(false);
      expect(await s.claimApply('sr_00000000000000009999', 'a', at(9000), stale)).toBe(false);
    });

    test('records what was applied only for the desk that holds the claim', async () => {
      const s = await make();
      await s.ingest(sampleRequest(1), EXTRA);
      await s.decide(sampleRequest(1).id, {
        status: 'approved',
        by: 'op',
        via: 'tui',
        at: at(7000),
        scope: 'turn',
      });
      const id = sampleRequest(1).id;
      expect(await s.claimApply(id, 'a', at(8000), at(0))).toBe(true);
      // a paused past the claim's staleness; b takes it over.
      expect(await s.claimApply(id, 'b', at(70_000), at(60_000))).toBe(true);
      expect(await s.recordRemediation(id, { ok: true, detail: 'a woke' }, at(71_000), 'a')).toBe(
        false,
      );
      expect(await s.recordRemediation(id, { ok: true, detail: 'b' }, at(72_000), 'b')).toBe(true);
      expect(await s.get(id)).toMatchObject({ remediation: { ok: true, detail: 'b' } });
    });

    test('pending until its time is up: then expired, and no longer waited for', async () => {
      const s = await make();
      await s.ingest(sampleRequest(1, {}, 10_000), EXTRA);
      await s.ingest(sampleRequest(2, { slug: 'other-1' }), EXTRA);
      expect(await s.hasPending('impl-1', T0 + 5000)).toBe(true);
      expect(await s.hasPending('impl-1', T0 + 11_001)).toBe(false);
      expect(await s.hasPending('nobody', T0)).toBe(false);
      expect((await s.expired(T0 + 11_001)).map((r) => r.id)).toEqual(['sr_00000000000000000001']);
      expect(await s.expired(T0 + 5000)).toEqual([]);
    });

    test('counts rejections and expiries in a row, newest first, per bottle and kind', async () => {
      const s = await make();
      const decide = (n: number, status: 'rejected' | 'expired' | 'approved' | 'cancelled') =>
        s.decide(sampleRequest(n).id, {
          status,
          by: 'a',
          via: 'cli',
          at: at(n * 1000 + 500),
          reason: 'r',
        });
      for (const n of [1, 2, 3, 4, 5]) await s.ingest(sampleRequest(n), EXTRA);
      await s.ingest(sampleRequest(6, { kind: 'routes' }), EXTRA);
      await decide(1, 'rejected');
      await decide(2, 'approved');
      await decide(3, 'rejected');
      await decide(4, 'cancelled');
      await decide(5, 'expired');
      await decide(6, 'rejected');
      // 5 expired, 4 cancelled (not counted), 3 rejected, then 2 approved ends it.
      expect(await s.rejectionStreak('impl-1', 'allowlist')).toBe(2);
      expect(await s.rejectionStreak('impl-1', 'routes')).toBe(1);
      expect(await s.rejectionStreak('impl-1', 'dockerfile')).toBe(0);
    });
  },
);
