import { expect } from 'vitest';
import { agreement, type FleetRoster } from '../roster';
import { conformanceSuite, expectCode } from './setup';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const A = 'a'.repeat(64);
const B = 'b'.repeat(64);

/** The behaviour every `FleetRoster` must have. Check-ins run out during it: real time. */
export const describeRosterConformance = conformanceSuite<FleetRoster>(
  'FleetRoster',
  ({ make, test }) => {
    test('lists who checked in within their time, the earliest joined first', async () => {
      const roster = await make();
      expect((await roster.checkIn('r1', A, 60_000)).map((m) => m.replica)).toEqual(['r1']);
      await sleep(5);
      const two = await roster.checkIn('r2', A, 60_000);
      expect(two.map((m) => [m.replica, m.configHash])).toEqual([
        ['r1', A],
        ['r2', A],
      ]);
      expect(Date.parse(two[0]!.joinedAt)).toBeLessThanOrEqual(Date.parse(two[1]!.joinedAt));
      // Checking in again keeps the first join; one that runs out is gone, and joins anew.
      await roster.checkIn('short', A, 100);
      await sleep(200);
      const after = await roster.checkIn('r1', A, 60_000);
      expect(after.map((m) => m.replica)).toEqual(['r1', 'r2']);
      expect(after[0]!.joinedAt).toBe(two[0]!.joinedAt);
      const back = await roster.checkIn('short', A, 60_000);
      expect(back.map((m) => m.replica)).toEqual(['r1', 'r2', 'short']);
      await roster.leave('r2');
      expect((await roster.checkIn('r1', A, 60_000)).map((m) => m.replica)).toEqual([
        'r1',
        'short',
      ]);
    });

    test('one whose configuration differs from the first-joined member does not agree until that one is gone', async () => {
      const roster = await make();
      await roster.checkIn('old', A, 60_000);
      await sleep(5);
      const members = await roster.checkIn('new', B, 60_000);
      expect(agreement(members, 'old')).toEqual({ agreed: true });
      const no = agreement(members, 'new');
      expect(no.agreed).toBe(false);
      expect(no.agreed === false && no.with).toMatchObject({ replica: 'old', configHash: A });
      await roster.leave('old');
      expect(agreement(await roster.checkIn('new', B, 60_000), 'new')).toEqual({ agreed: true });
    });

    test('bad input is INVALID_INPUT and changes nothing', async () => {
      const roster = await make();
      await expectCode(() => roster.checkIn('has space', A, 1000), 'INVALID_INPUT');
      await expectCode(() => roster.checkIn('r1', 'not-hex', 1000), 'INVALID_INPUT');
      await expectCode(() => roster.checkIn('r1', A, 0), 'INVALID_INPUT');
      await expectCode(() => roster.leave(''), 'INVALID_INPUT');
      expect(await roster.checkIn('r1', A, 1000)).toHaveLength(1);
    });
  },
);
