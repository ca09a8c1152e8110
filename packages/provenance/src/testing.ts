/**
 * @module
 * `@bb/provenance/testing`: the behaviour every `RunRecordStore` must have.
 * Call it from a vitest test file:
 *
 * ```ts
 * import { describeRunStoreConformance } from '@bb/provenance/testing';
 * describeRunStoreConformance('my store', { create: () => new MyRunStore() });
 * ```
 *
 * `vitest` is an optional peer dependency, needed only here.
 */
import { generateKeyPairSync } from 'node:crypto';
import { isBbError } from '@bb/errors';
import { type ConformanceOptions, conformanceSuite, expectCode } from '@bb/state/testing';
import { expect } from 'vitest';
import { keyIdOf, keyRing, type SigningKey, trustedKeyOf } from './keys';
import { GENESIS_HASH, RECORD_VERSION, type RunRecord, type SignedRecord } from './record';
import { signRecord, verifyRecord } from './sign';
import type { RunRecordStore } from './store';

/** `create` (a fresh, empty store per test), `dispose`, `skip`: as in `@bb/state/testing`. */
export type RunStoreConformanceOptions<T> = ConformanceOptions<T>;

/** A throwaway signing key for test records. */
export function testSigningKey(): SigningKey {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return {
    privateKey,
    publicKey,
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    keyId: keyIdOf(publicKey),
  };
}

/** A schema-valid run record of bottle `slug`, turn `turn`, continuing `prev`. */
export function sampleRecord(
  slug: string,
  turn: number,
  prev: string,
  over: Partial<RunRecord> = {},
): RunRecord {
  const started = new Date(Date.UTC(2026, 10, 24, 8, 0, turn)).toISOString();
  return {
    version: RECORD_VERSION,
    id: `${slug}-t${turn}`,
    slug,
    agent: 'claude',
    bottles: ['default'],
    forge: { owner: 'acme', repo: 'widgets', issue: 7, prs: [] },
    turn,
    startedAt: started,
    finishedAt: started,
    durationMs: 1000,
    exitCode: 0,
    done: { status: 'success', summary: `turn ${turn}` },
    watchdogFired: null,
    secretScan: { tool: 'gitleaks', scanned: 'abc..def', findings: [] },
    opLog: { verified: true, problems: [], entries: [] },
    bbVersion: '0.0.0',
    gitCommit: null,
    prev,
    ...over,
  };
}

/** The behaviour every `RunRecordStore` must have. */
export const describeRunStoreConformance = conformanceSuite<RunRecordStore>(
  'RunRecordStore',
  ({ make, test }) => {
    const key = testSigningKey();
    /** Append turns 1..n of `slug`, each continuing the chain as the store reports it. */
    const appendTurns = async (
      store: RunRecordStore,
      slug: string,
      n: number,
      over: Partial<RunRecord> = {},
    ) => {
      const out: SignedRecord[] = [];
      for (let turn = 1; turn <= n; turn++) {
        const s = signRecord(sampleRecord(slug, turn, await store.head(slug), over), key);
        await store.append(s);
        out.push(s);
      }
      return out;
    };

    test('an empty chain starts at the genesis hash; nothing is found', async () => {
      const store = await make();
      expect(await store.head('b-1')).toBe(GENESIS_HASH);
      expect(await store.get('nope')).toBeUndefined();
      expect(await store.chain('b-1')).toEqual([]);
      expect(await store.list()).toEqual({ total: 0, records: [] });
    });

    test('appended records round-trip and form each bottle its chain, oldest first', async () => {
      const store = await make();
      const a = await appendTurns(store, 'a-1', 3);
      const b = await appendTurns(store, 'b-2', 2);
      expect(await store.head('a-1')).toBe(a[2]!.hash);
      expect(await store.get(a[1]!.record.id)).toEqual(a[1]);
      expect(await store.chain('a-1')).toEqual(a);
      expect(await store.chain('b-2')).toEqual(b);
    });

    test('a record that does not continue its chain is a CONFLICT and stores nothing', async () => {
      const store = await make();
      const [first] = await appendTurns(store, 'c-3', 1);
      // Names the genesis again (a fork of the chain), and a replay of the stored one.
      const fork = signRecord(sampleRecord('c-3', 2, GENESIS_HASH, { id: 'fork' }), key);
      await expectCode(() => store.append(fork), 'CONFLICT');
      await expectCode(() => store.append(first!), 'CONFLICT');
      expect(await store.get('fork')).toBeUndefined();
      expect(await store.chain('c-3')).toEqual([first]);
    });

    test('two writers racing on one chain: one wins, the other is a CONFLICT', async () => {
      const store = await make();
      const prev = await store.head('r-4');
      const one = signRecord(sampleRecord('r-4', 1, prev, { id: 'one' }), key);
      const two = signRecord(sampleRecord('r-4', 1, prev, { id: 'two' }), key);
      const results = await Promise.allSettled([
        Promise.resolve().then(() => store.append(one)),
        Promise.resolve().then(() => store.append(two)),
      ]);
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const lost = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      expect(isBbError(lost.reason, 'CONFLICT')).toBe(true);
      expect(await store.chain('r-4')).toHaveLength(1);
    });

    test('list filters, counts and pages, newest first', async () => {
      const store = await make();
      await appendTurns(store, 'l-5', 3);
      await appendTurns(store, 'l-6', 2, {
        agent: 'codex',
        forge: { owner: 'acme', repo: 'gadgets', issue: 9, prs: [] },
        done: { status: 'failure', summary: 'no' },
      });
      const all = await store.list({}, 1, 10);
      expect(all.total).toBe(5);
      // Newest first: by start time (turn 3 of l-5 started last).
      expect(all.records.map((r) => r.record.id)).toEqual([
        'l-5-t3',
        'l-6-t2',
        'l-5-t2',
        'l-6-t1',
        'l-5-t1',
      ]);
      const page2 = await store.list({}, 2, 2);
      expect(page2.total).toBe(5);
      expect(page2.records.map((r) => r.record.id)).toEqual(['l-5-t2', 'l-6-t1']);
      expect((await store.list({ agent: 'codex' })).total).toBe(2);
      expect((await store.list({ repo: 'acme/gadgets' })).total).toBe(2);
      expect((await store.list({ repo: 'acme/widgets', issue: 7 })).total).toBe(3);
      expect((await store.list({ status: 'failure' })).total).toBe(2);
      expect((await store.list({ slug: 'l-5', status: 'success' })).total).toBe(3);
      expect((await store.list({ slug: 'nope' })).records).toEqual([]);
    });

    test("trusted keys: each is kept once, oldest first, and a key stored under another's id is refused", async () => {
      const store = await make();
      expect(await store.trustedKeys()).toEqual([]);
      const a = testSigningKey();
      const b = testSigningKey();
      const first = trustedKeyOf(a, 'replica-a');
      await store.trustKey({ ...first, addedAt: '2026-11-24T08:00:00.000Z' });
      await store.trustKey({
        ...trustedKeyOf(b, 'replica-b'),
        addedAt: '2026-11-24T09:00:00.000Z',
      });
      // Added again (a restart): nothing changes, its first entry stays.
      await store.trustKey({
        ...trustedKeyOf(a, 'replica-c'),
        addedAt: '2026-11-25T08:00:00.000Z',
      });
      expect(await store.trustedKeys()).toEqual([
        {
          keyId: a.keyId,
          publicKey: a.publicPem,
          by: 'replica-a',
          addedAt: '2026-11-24T08:00:00.000Z',
        },
        {
          keyId: b.keyId,
          publicKey: b.publicPem,
          by: 'replica-b',
          addedAt: '2026-11-24T09:00:00.000Z',
        },
      ]);
      // One key's id with another's key: never trusted.
      const forged = testSigningKey();
      await expectCode(
        () =>
          store.trustKey({
            ...trustedKeyOf(forged, 'x'),
            keyId: b.keyId.replace(/.$/, (c) => (c === '0' ? '1' : '0')),
          }),
        'STATE_CORRUPT',
      );
      expect(await store.trustedKeys()).toHaveLength(2);
      // The ring of what is trusted verifies what each key signed, and says which.
      const ring = keyRing(await store.trustedKeys());
      const byB = signRecord(sampleRecord('k-1', 1, GENESIS_HASH), b);
      expect(verifyRecord(byB, ring)).toMatchObject({ ok: true, keyIds: [b.keyId] });
      const byForged = signRecord(sampleRecord('k-2', 1, GENESIS_HASH), forged);
      expect(verifyRecord(byForged, ring).ok).toBe(false);
    });
  },
);
