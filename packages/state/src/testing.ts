/**
 * @module
 * `@bb/state/testing`: the behaviour suites every `ForgeStateStore` and
 * `DeliveryLedger` implementation must pass. Call them from a vitest test file:
 *
 * ```ts
 * import { describeStoreConformance } from '@bb/state/testing';
 * describeStoreConformance('my store', { create: () => new MyStore() });
 * ```
 *
 * `vitest` is an optional peer dependency, needed only here.
 */
import { isBbError } from '@bb/errors';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeliveryLedger } from './delivery-ledger';
import type { ForgeState } from './forge-state';
import type { ForgeStateStore } from './store';
import { sampleState } from './testing-data';

export { sampleState };

export interface ConformanceOptions<T> {
  /** A fresh, empty instance per test. */
  create: () => T | Promise<T>;
  /** Called after each test with the instance `create` returned. */
  dispose?: (instance: T) => void | Promise<void>;
  /** Tests to skip, by name, with the reason shown in the test report. */
  skip?: { reason: string; tests: string[] };
}

function setup<T>(options: ConformanceOptions<T>) {
  let current: T | undefined;
  afterEach(async () => {
    if (current !== undefined) await options.dispose?.(current);
    current = undefined;
  });
  const make = async () => {
    current = await options.create();
    return current;
  };
  const test = (name: string, fn: () => Promise<void> | void) => {
    if (options.skip?.tests.includes(name)) {
      it.skip(`${name} (skipped: ${options.skip.reason})`, () => {});
    } else {
      it(name, fn);
    }
  };
  return { make, test };
}

function expectCode(fn: () => unknown, code: string): void {
  let thrown: unknown;
  try {
    fn();
  } catch (err) {
    thrown = err;
  }
  expect(thrown, `expected a BbError with code ${code}`).toBeDefined();
  expect(
    isBbError(thrown, code),
    `expected code ${code}, got ${String((thrown as { code?: string }).code)}: ${String(thrown)}`,
  ).toBe(true);
}

/** The behaviour every `ForgeStateStore` must have. */
export function describeStoreConformance<T extends ForgeStateStore>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`ForgeStateStore conformance: ${name}`, () => {
    const { make, test } = setup(options);

    test('get returns undefined for a missing row', async () => {
      const store = await make();
      expect(store.get('acme', 'widgets', 1)).toBeUndefined();
      expect(store.all()).toEqual([]);
    });

    test('upsert then get round-trips every field', async () => {
      const store = await make();
      const s = sampleState(17, {
        bottleNames: ['default', 'with-node'],
        prNumber: 18,
        status: 'frozen',
        sessionId: '1b6f0a6e-2f3c-4c2e-9a55-7f0c1f0c9a11',
        cwd: '/workspace',
      });
      store.upsert(s);
      expect(store.get('acme', 'widgets', 17)).toEqual(s);
    });

    test('upsert replaces every field but createdAt', async () => {
      const store = await make();
      store.upsert(sampleState(17));
      const next = sampleState(17, {
        status: 'frozen',
        prNumber: 18,
        sessionId: 'sess-1',
        createdAt: '2030-01-01T00:00:00.000Z',
        updatedAt: '2026-11-22T06:00:00.000Z',
        lastCheckinAt: '2026-11-22T05:59:00.000Z',
      });
      store.upsert(next);
      const got = store.get('acme', 'widgets', 17);
      expect(got).toEqual({ ...next, createdAt: sampleState(17).createdAt });
      expect(store.all()).toHaveLength(1);
    });

    test('rows are keyed by owner, repo and issue number', async () => {
      const store = await make();
      store.upsert(sampleState(1, { slug: 'a-1' }));
      store.upsert(sampleState(1, { slug: 'b-1', repo: 'gadgets' }));
      store.upsert(sampleState(1, { slug: 'c-1', owner: 'zeta' }));
      expect(store.get('acme', 'widgets', 1)?.slug).toBe('a-1');
      expect(store.get('acme', 'gadgets', 1)?.slug).toBe('b-1');
      expect(store.get('zeta', 'widgets', 1)?.slug).toBe('c-1');
      expect(store.get('acme', 'widgets', 2)).toBeUndefined();
    });

    test('delete removes the row and is idempotent', async () => {
      const store = await make();
      store.upsert(sampleState(5));
      store.delete('acme', 'widgets', 5);
      expect(store.get('acme', 'widgets', 5)).toBeUndefined();
      expect(() => store.delete('acme', 'widgets', 5)).not.toThrow();
      expect(() => store.delete('acme', 'widgets', 999)).not.toThrow();
    });

    test('all() is ordered by owner, repo, issue number', async () => {
      const store = await make();
      const keys: Array<[string, string, number]> = [
        ['zeta', 'a', 1],
        ['acme', 'widgets', 10],
        ['acme', 'widgets', 9],
        ['acme', 'gadgets', 100],
        ['Acme', 'widgets', 3],
      ];
      keys.forEach(([owner, repo, n], i) => {
        store.upsert(sampleState(n, { owner, repo, slug: `s-${i}` }));
      });
      expect(store.all().map((s) => `${s.owner}/${s.repo}#${s.issueNumber}`)).toEqual([
        'Acme/widgets#3',
        'acme/gadgets#100',
        'acme/widgets#9',
        'acme/widgets#10',
        'zeta/a#1',
      ]);
    });

    test('returned rows are copies: changing them does not change the store', async () => {
      const store = await make();
      store.upsert(sampleState(3));
      const got = store.get('acme', 'widgets', 3)!;
      got.bottleNames.push('evil');
      got.status = 'destroyed';
      expect(store.get('acme', 'widgets', 3)).toEqual(sampleState(3));
    });

    test('invalid values are rejected with INVALID_INPUT and change nothing', async () => {
      const store = await make();
      store.upsert(sampleState(7));
      const bad: Array<Partial<Record<keyof ForgeState, unknown>>> = [
        { status: 'paused' },
        { issueNumber: -1 },
        { issueNumber: 1.5 },
        { slug: '../etc' },
        { owner: '' },
        { bottleNames: 'default' },
        { lastCheckinAt: 'yesterday' },
        { prNumber: 0 },
      ];
      for (const over of bad) {
        expectCode(
          () => store.upsert({ ...sampleState(7), ...over } as ForgeState),
          'INVALID_INPUT',
        );
      }
      expect(store.all()).toEqual([sampleState(7)]);
      expectCode(() => store.get('acme', 'widgets', 0), 'INVALID_INPUT');
      expectCode(() => store.get('', 'widgets', 1), 'INVALID_INPUT');
      expectCode(() => store.delete('acme', 'widgets', Number.NaN), 'INVALID_INPUT');
    });

    test('a slug already used by another issue is a CONFLICT and changes nothing', async () => {
      const store = await make();
      store.upsert(sampleState(1, { slug: 'same' }));
      expectCode(() => store.upsert(sampleState(2, { slug: 'same' })), 'CONFLICT');
      expect(store.get('acme', 'widgets', 2)).toBeUndefined();
      expect(store.all()).toHaveLength(1);
    });

    test('many rows survive in full', async () => {
      const store = await make();
      for (let i = 1; i <= 300; i++) store.upsert(sampleState(i));
      const all = store.all();
      expect(all).toHaveLength(300);
      expect(all.map((s) => s.issueNumber)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    });
  });
}

/** The behaviour every `DeliveryLedger` must have. */
export function describeLedgerConformance<T extends DeliveryLedger>(
  name: string,
  options: ConformanceOptions<T>,
): void {
  describe(`DeliveryLedger conformance: ${name}`, () => {
    const { make, test } = setup(options);

    test('a key is new once, then known', async () => {
      const ledger = await make();
      expect(ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:00Z')).toBe(
        true,
      );
      expect(ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:00Z')).toBe(
        false,
      );
      expect(ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:01Z')).toBe(
        true,
      );
    });

    test('the first delivery meta is kept', async () => {
      const ledger = await make();
      ledger.recordDelivery('k1', { deliveryId: 'uuid-1', event: 'issues' });
      ledger.recordDelivery('k1', { deliveryId: 'uuid-2', event: 'issues' });
      const rec = ledger.getDelivery('k1');
      expect(rec?.deliveryId).toBe('uuid-1');
      expect(rec?.event).toBe('issues');
      expect(Number.isNaN(Date.parse(rec?.receivedAt ?? ''))).toBe(false);
      expect(ledger.getDelivery('missing')).toBeUndefined();
    });

    test('prune removes only older entries', async () => {
      const ledger = await make();
      ledger.recordDelivery('old');
      const removed = ledger.pruneDeliveries(new Date(Date.now() - 60_000));
      expect(removed).toBe(0);
      expect(ledger.pruneDeliveries(new Date(Date.now() + 60_000))).toBe(1);
      expect(ledger.getDelivery('old')).toBeUndefined();
      expect(ledger.recordDelivery('old')).toBe(true);
    });

    test('bad keys are INVALID_INPUT', async () => {
      const ledger = await make();
      expectCode(() => ledger.recordDelivery(''), 'INVALID_INPUT');
      expectCode(() => ledger.recordDelivery('x'.repeat(513)), 'INVALID_INPUT');
      expectCode(() => ledger.recordDelivery(42 as unknown as string), 'INVALID_INPUT');
    });
  });
}
