import { expect } from 'vitest';
import type { LeaseStore } from '../leases';
import { conformanceSuite, expectCode } from './setup';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The behaviour every `LeaseStore` must have. Two leases run out during it
 * (about a second in all): the store's clock must be real time.
 */
export const describeLeaseConformance = conformanceSuite<LeaseStore>(
  'LeaseStore',
  ({ make, test }) => {
    test('a free lease is taken; nobody else gets it until it runs out, then one does', async () => {
      const leases = await make();
      const first = await leases.claim('issue:acme/widgets#1', 'replica-a', 300);
      expect(first).toMatchObject({ held: true, holder: 'replica-a' });
      expect(first.takenFrom).toBeUndefined();
      expect(await leases.claim('issue:acme/widgets#1', 'replica-b', 300)).toMatchObject({
        held: false,
        holder: 'replica-a',
      });
      await sleep(450);
      const taken = await leases.claim('issue:acme/widgets#1', 'replica-b', 5_000);
      expect(taken).toMatchObject({ held: true, holder: 'replica-b' });
      expect(taken.takenFrom?.holder).toBe('replica-a');
      expect(Date.parse(taken.takenFrom!.expiredAt)).toBeLessThanOrEqual(Date.now());
      expect(await leases.claim('issue:acme/widgets#1', 'replica-a', 300)).toMatchObject({
        held: false,
        holder: 'replica-b',
      });
    });

    test('the holder extends its leases; one taken by another is not renewed', async () => {
      const leases = await make();
      await leases.claim('a', 'r1', 300);
      await leases.claim('b', 'r1', 300);
      await leases.claim('c', 'r2', 60_000);
      // Claiming again extends; renewing keeps a and b past their first end.
      expect((await leases.claim('a', 'r1', 300)).held).toBe(true);
      expect((await leases.renew('r1', ['a', 'b', 'c'], 60_000)).sort()).toEqual(['a', 'b']);
      await sleep(450);
      expect((await leases.claim('a', 'r2', 300)).held).toBe(false);
      // Run out and taken: the old holder's renewal does not get it back.
      await leases.claim('short', 'r1', 100);
      await sleep(200);
      expect((await leases.claim('short', 'r2', 60_000)).held).toBe(true);
      expect(await leases.renew('r1', ['short'], 60_000)).toEqual([]);
      // Run out but taken by nobody: still the holder's to renew.
      await leases.claim('lapsed', 'r1', 100);
      await sleep(200);
      expect(await leases.renew('r1', ['lapsed'], 60_000)).toEqual(['lapsed']);
      expect((await leases.claim('lapsed', 'r2', 100)).held).toBe(false);
      expect(await leases.renew('r1', [], 1000)).toEqual([]);
    });

    test('a released lease is free at once; only its holder can release it', async () => {
      const leases = await make();
      await leases.claim('x', 'r1', 60_000);
      await leases.release('x', 'r2');
      expect((await leases.claim('x', 'r2', 60_000)).held).toBe(false);
      await leases.release('x', 'r1');
      const again = await leases.claim('x', 'r2', 60_000);
      expect(again.held).toBe(true);
      expect(again.takenFrom).toBeUndefined();
      await leases.release('never-held', 'r1');
    });

    test('the fencing token stays while one holder keeps the lease and rises each time it changes hands', async () => {
      const leases = await make();
      const first = await leases.claim('fenced', 'r1', 100);
      expect(first.token).toBeGreaterThan(0);
      // Claimed again, renewed, run out and taken by nobody: the same holder, the same token.
      expect((await leases.claim('fenced', 'r1', 100)).token).toBe(first.token);
      await sleep(200);
      expect((await leases.claim('fenced', 'r1', 100)).token).toBe(first.token);
      // Refused: no token.
      expect(await leases.claim('fenced', 'r2', 100)).toMatchObject({ held: false, token: 0 });
      // Taken after it ran out: a larger token; the old holder's next claim is larger still.
      await sleep(200);
      const taken = await leases.claim('fenced', 'r2', 60_000);
      expect(taken.token).toBeGreaterThan(first.token);
      await leases.release('fenced', 'r2');
      const back = await leases.claim('fenced', 'r1', 60_000);
      expect(back.held).toBe(true);
      expect(back.token).toBeGreaterThan(taken.token);
      // Released and claimed again by the same holder: a new token too.
      await leases.release('fenced', 'r1');
      expect((await leases.claim('fenced', 'r1', 60_000)).token).toBeGreaterThan(back.token);
      // A released lease is not listed.
      await leases.release('fenced', 'r1');
      expect((await leases.leases()).map((l) => l.name)).not.toContain('fenced');
    });

    test('of many claimants of a free lease exactly one gets it', async () => {
      const leases = await make();
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          Promise.resolve().then(() => leases.claim('contested', `r${i}`, 60_000)),
        ),
      );
      const winners = results.filter((r) => r.held);
      expect(winners).toHaveLength(1);
      expect(results.every((r) => r.holder === winners[0]!.holder)).toBe(true);
    });

    test('leases() lists those not run out, by name', async () => {
      const leases = await make();
      await leases.claim('b', 'r1', 60_000);
      await leases.claim('a', 'r2', 60_000);
      await leases.claim('gone', 'r1', 100);
      await sleep(200);
      const live = await leases.leases();
      expect(live.map((l) => [l.name, l.holder])).toEqual([
        ['a', 'r2'],
        ['b', 'r1'],
      ]);
      expect(Date.parse(live[0]!.expiresAt)).toBeGreaterThan(Date.now());
    });

    test('bad input is INVALID_INPUT and changes nothing', async () => {
      const leases = await make();
      await expectCode(() => leases.claim('', 'r1', 1000), 'INVALID_INPUT');
      await expectCode(() => leases.claim('x', 'has space', 1000), 'INVALID_INPUT');
      await expectCode(() => leases.claim('x', 'r1', 0), 'INVALID_INPUT');
      await expectCode(() => leases.claim('x', 'r1', 1.5), 'INVALID_INPUT');
      await expectCode(() => leases.renew('r1', [''], 1000), 'INVALID_INPUT');
      await expectCode(() => leases.release('x', ''), 'INVALID_INPUT');
      expect(await leases.leases()).toEqual([]);
    });
  },
);
