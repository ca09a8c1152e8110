import { expect } from 'vitest';
import type { DeliveryLedger } from '../delivery-ledger';
import { conformanceSuite, expectCode } from './setup';

/** The behaviour every `DeliveryLedger` must have. */
export const describeLedgerConformance = conformanceSuite<DeliveryLedger>(
  'DeliveryLedger',
  ({ make, test }) => {
    test('a key is new once, then known', async () => {
      const ledger = await make();
      expect(
        await ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:00Z'),
      ).toBe(true);
      expect(
        await ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:00Z'),
      ).toBe(false);
      expect(
        await ledger.recordDelivery('issues:acme/widgets#17:assigned:2026-11-22T05:00:01Z'),
      ).toBe(true);
    });

    test('the first delivery meta is kept', async () => {
      const ledger = await make();
      await ledger.recordDelivery('k1', { deliveryId: 'uuid-1', event: 'issues' });
      await ledger.recordDelivery('k1', { deliveryId: 'uuid-2', event: 'issues' });
      const rec = await ledger.getDelivery('k1');
      expect(rec?.deliveryId).toBe('uuid-1');
      expect(rec?.event).toBe('issues');
      expect(Number.isNaN(Date.parse(rec?.receivedAt ?? ''))).toBe(false);
      expect(await ledger.getDelivery('missing')).toBeUndefined();
    });

    test('prune removes only older entries', async () => {
      const ledger = await make();
      await ledger.recordDelivery('old');
      const removed = await ledger.pruneDeliveries(new Date(Date.now() - 60_000));
      expect(removed).toBe(0);
      expect(await ledger.pruneDeliveries(new Date(Date.now() + 60_000))).toBe(1);
      expect(await ledger.getDelivery('old')).toBeUndefined();
      expect(await ledger.recordDelivery('old')).toBe(true);
    });

    test('bad keys are INVALID_INPUT', async () => {
      const ledger = await make();
      await expectCode(() => ledger.recordDelivery(''), 'INVALID_INPUT');
      await expectCode(() => ledger.recordDelivery('x'.repeat(513)), 'INVALID_INPUT');
      await expectCode(() => ledger.recordDelivery(42 as unknown as string), 'INVALID_INPUT');
    });
  },
);
