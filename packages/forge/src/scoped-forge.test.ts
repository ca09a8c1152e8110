import { isBbError } from '@bb/errors';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ScopedForge } from './scoped-forge';
import { MemoryForge, MemoryForgeWorld } from './testing/memory-forge';

/** A MemoryForge that counts the writes reaching it. */
class CountingForge extends MemoryForge {
  writes: Array<{ op: string; n: number }> = [];
  override async postComment(n: number, body: string) {
    this.writes.push({ op: 'postComment', n });
    return super.postComment(n, body);
  }
  override async updateDescription(n: number, body: string) {
    this.writes.push({ op: 'updateDescription', n });
    return super.updateDescription(n, body);
  }
}

function setup() {
  const world = new MemoryForgeWorld();
  for (let i = 1; i <= 6; i++)
    world.addIssue('acme', 'widgets', { title: `issue ${i}`, author: 'alice' });
  const inner = new CountingForge({ owner: 'acme', repo: 'widgets', as: 'bb-claude', world });
  return { world, inner, scoped: new ScopedForge(inner, { issue: 3, branch: 'bb/implementer-3' }) };
}

type Op =
  | { kind: 'comment' | 'describe'; n: number }
  | { kind: 'openPr' }
  | { kind: 'read'; n: number };

/** A PR from issue 3's bottle branch onto main, with this body. */
const bottlePr = (body: string) => ({ head: 'bb/implementer-3', base: 'main', title: 't', body });

describe('ScopedForge', () => {
  it('a write reaches the inner forge iff its target is in scope at that moment (property)', async () => {
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.record({
        kind: fc.constantFrom('comment' as const, 'describe' as const),
        n: fc.integer({ min: 1, max: 12 }),
      }),
      fc.constant({ kind: 'openPr' as const }),
      fc.record({ kind: fc.constant('read' as const), n: fc.integer({ min: 1, max: 6 }) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 25 }), async (ops) => {
        const { world, inner, scoped } = setup();
        world.pushBranch('acme', 'widgets', 'bb/implementer-3');
        const scope = new Set([3]);
        for (const o of ops) {
          const before = inner.writes.length;
          if (o.kind === 'read') {
            await scoped.readIssue(o.n);
            expect(inner.writes.length).toBe(before);
            continue;
          }
          if (o.kind === 'openPr') {
            try {
              const pr = await scoped.openPr(bottlePr('b'));
              scope.add(pr.number);
            } catch (err) {
              expect(isBbError(err, 'CONFLICT')).toBe(true);
            }
            continue;
          }
          const allowed = scope.has(o.n);
          let denied = false;
          try {
            if (o.kind === 'comment') await scoped.postComment(o.n, 'hi');
            else await scoped.updateDescription(o.n, 'body');
          } catch (err) {
            if (isBbError(err, 'SCOPE_DENIED')) denied = true;
            else if (!isBbError(err, 'NOT_FOUND')) throw err;
          }
          expect(denied).toBe(!allowed);
          expect(inner.writes.length).toBe(allowed ? before + 1 : before);
          expect(scoped.scope.sort()).toEqual([...scope].sort());
        }
      }),
      { numRuns: 300 },
    );
  });

  it('denial carries op, target and reason, and names the scope', async () => {
    const { scoped } = setup();
    const err = await scoped.postComment(5, 'x').catch((e) => e);
    expect(err.code).toBe('SCOPE_DENIED');
    expect(err.data).toMatchObject({ op: 'postComment', target: 5 });
    expect(err.message).toMatch(/#5 denied: this bottle may write only to issue #3/);
  });

  it('openPr only from the bottle branch, and links the issue when the body does not', async () => {
    const { world, scoped } = setup();
    world.pushBranch('acme', 'widgets', 'other');
    world.pushBranch('acme', 'widgets', 'bb/implementer-3');
    await expect(
      scoped.openPr({ head: 'other', base: 'main', title: 't', body: '' }),
    ).rejects.toMatchObject({ code: 'SCOPE_DENIED' });
    const pr = await scoped.openPr(bottlePr('Made it work.'));
    expect(pr.body).toBe('Made it work.\n\nFixes #3');
    expect(scoped.inScope(pr.number)).toBe(true);
    expect(await scoped.getPrForIssue(3)).toBe(pr.number);
  });

  it('keeps a body that already mentions the issue, and not a longer number', async () => {
    const { world, scoped } = setup();
    world.pushBranch('acme', 'widgets', 'bb/implementer-3');
    const pr = await scoped.openPr(bottlePr('Resolves #3.'));
    expect(pr.body).toBe('Resolves #3.');
    const { world: w2, scoped: s2 } = setup();
    w2.pushBranch('acme', 'widgets', 'bb/implementer-3');
    expect(
      (await s2.openPr({ head: 'bb/implementer-3', base: 'main', title: 't', body: 'see #33' }))
        .body,
    ).toBe('see #33\n\nFixes #3');
  });

  it('refuses a bad issue number', () => {
    const { inner } = setup();
    expect(() => new ScopedForge(inner, { issue: 0 })).toThrow(/positive issue number/);
  });
});
