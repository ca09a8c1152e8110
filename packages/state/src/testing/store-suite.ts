import { expect } from 'vitest';
import type { ForgeState } from '../forge-state';
import type { ForgeStateStore } from '../store';
import { sampleState } from '../testing-data';
import { conformanceSuite, expectCode } from './setup';

/** The behaviour every `ForgeStateStore` must have. */
export const describeStoreConformance = conformanceSuite<ForgeStateStore>(
  'ForgeStateStore',
  ({ make, test }) => {
    test('get returns undefined for a missing row', async () => {
      const store = await make();
      expect(await store.get('acme', 'widgets', 1)).toBeUndefined();
      expect(await store.all()).toEqual([]);
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
      await store.upsert(s);
      expect(await store.get('acme', 'widgets', 17)).toEqual(s);
    });

    test('upsert replaces every field but createdAt', async () => {
      const store = await make();
      await store.upsert(sampleState(17));
      const next = sampleState(17, {
        status: 'frozen',
        prNumber: 18,
        sessionId: 'sess-1',
        createdAt: '2030-01-01T00:00:00.000Z',
        updatedAt: '2026-11-22T06:00:00.000Z',
        lastCheckinAt: '2026-11-22T05:59:00.000Z',
      });
      await store.upsert(next);
      const got = await store.get('acme', 'widgets', 17);
      expect(got).toEqual({ ...next, createdAt: sampleState(17).createdAt });
      expect(await store.all()).toHaveLength(1);
    });

    test('rows are keyed by owner, repo and issue number', async () => {
      const store = await make();
      await store.upsert(sampleState(1, { slug: 'a-1' }));
      await store.upsert(sampleState(1, { slug: 'b-1', repo: 'gadgets' }));
      await store.upsert(sampleState(1, { slug: 'c-1', owner: 'zeta' }));
      expect((await store.get('acme', 'widgets', 1))?.slug).toBe('a-1');
      expect((await store.get('acme', 'gadgets', 1))?.slug).toBe('b-1');
      expect((await store.get('zeta', 'widgets', 1))?.slug).toBe('c-1');
      expect(await store.get('acme', 'widgets', 2)).toBeUndefined();
    });

    test('delete removes the row and is idempotent', async () => {
      const store = await make();
      await store.upsert(sampleState(5));
      await store.delete('acme', 'widgets', 5);
      expect(await store.get('acme', 'widgets', 5)).toBeUndefined();
      await store.delete('acme', 'widgets', 5);
      await store.delete('acme', 'widgets', 999);
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
      for (const [i, [owner, repo, n]] of keys.entries()) {
        await store.upsert(sampleState(n, { owner, repo, slug: `s-${i}` }));
      }
      expect((await store.all()).map((s) => `${s.owner}/${s.repo}#${s.issueNumber}`)).toEqual([
        'Acme/widgets#3',
        'acme/gadgets#100',
        'acme/widgets#9',
        'acme/widgets#10',
        'zeta/a#1',
      ]);
    });

    test('returned rows are copies: changing them does not change the store', async () => {
      const store = await make();
      await store.upsert(sampleState(3));
      const got = (await store.get('acme', 'widgets', 3))!;
      got.bottleNames.push('evil');
      got.status = 'destroyed';
      expect(await store.get('acme', 'widgets', 3)).toEqual(sampleState(3));
    });

    test('invalid values are rejected with INVALID_INPUT and change nothing', async () => {
      const store = await make();
      await store.upsert(sampleState(7));
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
        await expectCode(
          () => store.upsert({ ...sampleState(7), ...over } as ForgeState),
          'INVALID_INPUT',
        );
      }
      expect(await store.all()).toEqual([sampleState(7)]);
      await expectCode(() => store.get('acme', 'widgets', 0), 'INVALID_INPUT');
      await expectCode(() => store.get('', 'widgets', 1), 'INVALID_INPUT');
      await expectCode(() => store.delete('acme', 'widgets', Number.NaN), 'INVALID_INPUT');
    });

    test('a slug already used by another issue is a CONFLICT and changes nothing', async () => {
      const store = await make();
      await store.upsert(sampleState(1, { slug: 'same' }));
      await expectCode(() => store.upsert(sampleState(2, { slug: 'same' })), 'CONFLICT');
      expect(await store.get('acme', 'widgets', 2)).toBeUndefined();
      expect(await store.all()).toHaveLength(1);
    });

    test('a destroyed row leaves all() for the history, and get() still finds it', async () => {
      const store = await make();
      await store.upsert(sampleState(4, { slug: 'gone-1', prNumber: 40 }));
      await store.upsert(sampleState(5, { slug: 'kept-1' }));
      const destroyed = sampleState(4, {
        slug: 'gone-1',
        prNumber: 40,
        status: 'destroyed',
        updatedAt: '2026-11-22T07:00:00.000Z',
      });
      await store.upsert(destroyed);
      expect((await store.all()).map((r) => r.slug)).toEqual(['kept-1']);
      expect(await store.get('acme', 'widgets', 4)).toEqual(destroyed);
      expect(await store.history()).toEqual([destroyed]);
      // The same issue launched again: the live row wins, the old one stays history.
      await store.upsert(sampleState(4, { slug: 'again-1' }));
      expect((await store.get('acme', 'widgets', 4))?.slug).toBe('again-1');
      expect((await store.history()).map((r) => r.slug)).toEqual(['gone-1']);
      await store.delete('acme', 'widgets', 4);
      expect(await store.get('acme', 'widgets', 4)).toBeUndefined();
      expect(await store.history()).toEqual([]);
    });

    test('history() pages destroyed rows, most recently updated first', async () => {
      const store = await make();
      for (let i = 1; i <= 5; i++)
        await store.upsert(
          sampleState(i, {
            slug: `h-${i}`,
            status: 'destroyed',
            updatedAt: `2026-11-22T0${i}:00:00.000Z`,
          }),
        );
      const first = await store.history({ limit: 2 });
      expect(first.map((r) => r.slug)).toEqual(['h-5', 'h-4']);
      const next = await store.history({ limit: 2, before: first.at(-1)!.updatedAt });
      expect(next.map((r) => r.slug)).toEqual(['h-3', 'h-2']);
      await expectCode(() => store.history({ limit: 0 }), 'INVALID_INPUT');
    });

    test('findByPr finds the live row with that PR, never a destroyed one', async () => {
      const store = await make();
      await store.upsert(sampleState(7, { slug: 'p-7', prNumber: 70 }));
      await store.upsert(sampleState(8, { slug: 'p-8', prNumber: 80, repo: 'gadgets' }));
      expect((await store.findByPr('acme', 'widgets', 70))?.slug).toBe('p-7');
      expect(await store.findByPr('acme', 'widgets', 80)).toBeUndefined();
      expect((await store.findByPr('acme', 'gadgets', 80))?.slug).toBe('p-8');
      await store.upsert(sampleState(7, { slug: 'p-7', prNumber: 70, status: 'destroyed' }));
      expect(await store.findByPr('acme', 'widgets', 70)).toBeUndefined();
    });

    test('many rows survive in full', async () => {
      const store = await make();
      for (let i = 1; i <= 300; i++) await store.upsert(sampleState(i));
      const all = await store.all();
      expect(all).toHaveLength(300);
      expect(all.map((s) => s.issueNumber)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    });
  },
);
