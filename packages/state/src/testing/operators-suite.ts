import { expect } from 'vitest';
import { OPERATOR_TOKEN, type OperatorTokenStore } from '../operators';
import { conformanceSuite, expectCode } from './setup';

/** The behaviour every `OperatorTokenStore` must have. */
export const describeOperatorTokensConformance = conformanceSuite<OperatorTokenStore>(
  'OperatorTokenStore',
  ({ make, test }) => {
    test('makes a token per name and tells whose a token is; nothing else verifies', async () => {
      const tokens = await make();
      const carol = await tokens.add('carol');
      expect(carol).toMatch(OPERATOR_TOKEN);
      const dan = await tokens.add('dan');
      expect(dan).not.toBe(carol);
      expect(await tokens.verify(carol)).toBe('carol');
      expect(await tokens.verify(dan)).toBe('dan');
      expect(
        await tokens.verify(`${carol.slice(0, -1)}${carol.endsWith('x') ? 'y' : 'x'}`),
      ).toBeUndefined();
      expect(await tokens.verify('carol')).toBeUndefined();
      expect(await tokens.verify('')).toBeUndefined();
    });

    test('lists every operator by name, with when a token was made and last used', async () => {
      const tokens = await make();
      const zoe = await tokens.add('zoe');
      await tokens.add('al');
      const before = await tokens.list();
      expect(before.map((o) => [o.name, o.lastUsedAt, o.revokedAt])).toEqual([
        ['al', null, null],
        ['zoe', null, null],
      ]);
      expect(Number.isNaN(Date.parse(before[0]!.createdAt))).toBe(false);
      await tokens.verify(zoe);
      const after = (await tokens.list()).find((o) => o.name === 'zoe')!;
      expect(Date.parse(after.lastUsedAt!)).toBeGreaterThanOrEqual(Date.parse(after.createdAt));
    });

    test('revokes at once; a name has one live token; a revoked name gets a new one', async () => {
      const tokens = await make();
      const first = await tokens.add('carol');
      await expectCode(() => tokens.add('carol'), 'CONFLICT');
      await tokens.revoke('carol');
      expect(await tokens.verify(first)).toBeUndefined();
      await expectCode(() => tokens.revoke('carol'), 'NOT_FOUND');
      await expectCode(() => tokens.revoke('nobody'), 'NOT_FOUND');
      const second = await tokens.add('carol');
      expect(await tokens.verify(second)).toBe('carol');
      expect(await tokens.verify(first)).toBeUndefined();
      expect((await tokens.list()).map((o) => [o.name, !!o.revokedAt])).toEqual([
        ['carol', true],
        ['carol', false],
      ]);
    });

    test('refuses a bad name with the rule, and keeps nothing of it', async () => {
      const tokens = await make();
      for (const bad of ['', 'Carol', '-x', 'a b', 'x'.repeat(40), 'forge:alice'])
        await expectCode(() => tokens.add(bad), 'INVALID_INPUT');
      expect(await tokens.list()).toEqual([]);
    });
  },
);
