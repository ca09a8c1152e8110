import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ForgeStateKeySchema,
  ForgeStateSchema,
  parseForgeState,
  parseForgeStateKey,
} from './forge-state';
import { sampleState } from './testing-data';

// parseForgeState has a hand-written fast path; it must never accept what the
// zod schema rejects, and must return what zod returns when both accept.
describe('parseForgeState fast path', () => {
  const field = fc.oneof(
    fc.string(),
    fc.integer(),
    fc.double(),
    fc.constant(null),
    fc.constant(undefined),
    fc.array(fc.string()),
    fc.constantFrom(
      'running',
      'frozen',
      'paused',
      '2026-11-22T05:00:00Z',
      '2026-13-45T99:99:99Z',
      'a',
      '',
    ),
  );
  const keys = Object.keys(sampleState()) as Array<keyof ReturnType<typeof sampleState>>;

  it('agrees with the zod schema on mutated states', () => {
    fc.assert(
      fc.property(
        fc.subarray(keys, { minLength: 0, maxLength: 3 }),
        fc.array(field, { minLength: 3, maxLength: 3 }),
        (mutate, values) => {
          const candidate: Record<string, unknown> = { ...sampleState() };
          mutate.forEach((k, i) => {
            candidate[k] = values[i];
          });
          const zod = ForgeStateSchema.safeParse(candidate);
          let ours: unknown;
          let threw = false;
          try {
            ours = parseForgeState(candidate);
          } catch {
            threw = true;
          }
          expect(threw).toBe(!zod.success);
          if (zod.success) expect(ours).toEqual(zod.data);
        },
      ),
      { numRuns: 2000 },
    );
  });
});

// parseForgeStateKey checks a valid key by hand: it accepts exactly what the schema
// accepts and returns what the schema returns.
describe('parseForgeStateKey fast path', () => {
  const name = fc.oneof(
    fc.string(),
    fc.stringMatching(/^[A-Za-z0-9_.-]{0,102}$/),
    fc.constantFrom('acme', 'a.b-c_d', '', 'x'.repeat(100), 'x'.repeat(101), 'bad/name', 'é'),
    fc.integer(),
    fc.constant(null),
  );
  const number = fc.oneof(
    fc.integer(),
    fc.double(),
    fc.constantFrom(0, 1, -1, 1.5, 2_147_483_647, 2_147_483_648, Number.NaN, Infinity, '1'),
  );
  it('agrees with the zod schema', () => {
    fc.assert(
      fc.property(name, name, number, (owner, repo, issueNumber) => {
        const zod = ForgeStateKeySchema.safeParse({ owner, repo, issueNumber });
        let ours: unknown;
        try {
          ours = parseForgeStateKey(owner, repo, issueNumber);
        } catch (err) {
          expect((err as { code?: string }).code).toBe('INVALID_INPUT');
          expect(zod.success).toBe(false);
          return;
        }
        expect(zod.success).toBe(true);
        expect(ours).toEqual(zod.data);
      }),
      { numRuns: 5000 },
    );
  });
});
