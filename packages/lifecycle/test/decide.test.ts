import type { ForgeEvent, TargetingResult } from '@bb/forge';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type BottleView, type Decision, decide, type FactNeed, type Facts } from '../src/decide';
import { type LifecycleStatus, transition } from '../src/machine';

const BOT = 'bb-claude';
const who = fc.constantFrom(BOT, 'alice', 'mallory');
const pr = fc.integer({ min: 1, max: 4 });
const base = (over: Record<string, unknown>) =>
  ({
    key: 'k',
    deliveryId: undefined,
    owner: 'o',
    repo: 'r',
    sender: { id: 1, login: 'alice' },
    occurredAt: '2026-01-01T00:00:00Z',
    ...over,
  }) as unknown as ForgeEvent;
const prRef = (n: number, author: string, headSha = 'abc') => ({
  number: n,
  title: 't',
  body: '',
  state: 'open',
  head: `bb/${n}`,
  headSha,
  base: 'main',
  author,
});

const event: fc.Arbitrary<ForgeEvent> = fc.oneof(
  fc.constant(base({ kind: 'issue_targeting_changed', action: 'labeled', issue: { number: 7 } })),
  fc.constant(base({ kind: 'issue_closed', issue: { number: 7 } })),
  fc.tuple(pr, who).map(([n, a]) => base({ kind: 'pr_opened', pr: prRef(n, a) })),
  fc
    .tuple(pr, who, fc.constantFrom('abc', 'def', ''))
    .map(([n, a, sha]) =>
      base({ kind: 'pr_synchronized', pr: prRef(n, BOT, sha), sender: { id: 2, login: a } }),
    ),
  fc
    .tuple(pr, fc.boolean())
    .map(([n, merged]) =>
      base({ kind: 'pr_closed', pr: prRef(n, BOT), merged, mergeCommitSha: null }),
    ),
  fc.tuple(fc.option(pr, { nil: undefined }), who, fc.string()).map(([n, a, body]) =>
    base({
      kind: 'comment_created',
      on: n === undefined ? 'issue' : 'pr',
      number: n ?? 7,
      comment: { id: 99, author: a, body },
    }),
  ),
  fc
    .tuple(pr, who, fc.constantFrom('approved', 'changes_requested', 'commented'))
    .map(([n, a, state]) =>
      base({ kind: 'review_submitted', pr: prRef(n, BOT), state, author: a, body: 'b' }),
    ),
);

const view: fc.Arbitrary<BottleView> = fc.record({
  issue: fc.constant(7),
  known: fc.boolean(),
  state: fc.record({
    status: fc.constantFrom<LifecycleStatus>('none', 'running', 'frozen', 'destroyed'),
    prs: fc.uniqueArray(pr, { maxLength: 3 }),
    pending: fc.constant([]),
  }),
  heads: fc.constant(undefined),
});

/** A forge that answers every fact, the same for one run. */
const forge = fc.record({
  issueState: fc.constantFrom('open', 'closed'),
  targeted: fc.boolean(),
  labelled: fc.boolean(),
  assigned: fc.boolean(),
  openPr: fc.boolean(),
  may: fc.boolean(),
  reviewId: fc.option(fc.integer({ min: 1, max: 9 }), { nil: undefined }),
});
type World = typeof forge extends fc.Arbitrary<infer T> ? T : never;

function answer(w: World, need: FactNeed, facts: Facts): void {
  switch (need.type) {
    case 'targeting': {
      const targeting: TargetingResult = {
        targeted: w.targeted,
        agent: w.targeted ? 'claude' : undefined,
        bottle: undefined,
        assignee: w.targeted ? BOT : undefined,
        reasons: ['because'],
      };
      facts.issue = {
        state: w.issueState,
        title: 't',
        body: 'b',
        labels: w.labelled ? ['bot-bottle:claude'] : [],
        assignees: w.assigned ? [BOT] : [],
        targeting,
      };
      break;
    }
    case 'open_prs':
      facts.openPr = w.openPr;
      break;
    case 'may_drive':
      facts.may = w.may ? { ok: true, why: 'writer' } : { ok: false, why: 'no access' };
      break;
    case 'review':
      facts.review = { prompt: 'review', reviewId: w.reviewId };
      break;
  }
}

/** Decide as the orchestrator does: ask, gather, decide again; the needs in order. */
function run(e: ForgeEvent, v: BottleView, w: World, resumeOnHumanPush = false) {
  const facts: Facts = {};
  const asked: FactNeed['type'][] = [];
  for (let round = 0; round < 5; round++) {
    const d: Decision = decide(e, facts, v, { botLogin: BOT, resumeOnHumanPush });
    if (d.kind !== 'need') return { d, asked, facts };
    for (const need of d.needs) {
      asked.push(need.type);
      answer(w, need, facts);
    }
  }
  throw new Error('decide kept asking');
}

const live = (v: BottleView) => v.state.status === 'running' || v.state.status === 'frozen';

describe('decide', () => {
  it('asks for each fact at most once, and always comes to a decision', () => {
    fc.assert(
      fc.property(event, view, forge, fc.boolean(), (e, v, w, push) => {
        const { asked } = run(e, v, w, push);
        expect(new Set(asked).size).toBe(asked.length);
      }),
    );
  });

  it('reads nothing of the forge for a comment, review, push or close of a bottle that is not live, or by the bot', () => {
    fc.assert(
      fc.property(event, view, forge, fc.boolean(), (e, v, w, push) => {
        const { asked } = run(e, v, w, push);
        if (e.kind === 'issue_targeting_changed') expect(asked).toEqual(['targeting']);
        else if (!live(v)) expect(asked).toEqual([]);
        if (e.kind === 'comment_created' && e.comment.author === BOT) expect(asked).toEqual([]);
        if (e.kind === 'review_submitted' && e.author === BOT) expect(asked).toEqual([]);
      }),
    );
  });

  it('wakes an agent only for someone who may drive it, on its own issue or PRs', () => {
    fc.assert(
      fc.property(event, view, forge, fc.boolean(), (e, v, w, push) => {
        const { d, facts } = run(e, v, w, push);
        if (d.kind !== 'input') return;
        const input = d.input;
        if (input.type === 'message' || input.type === 'pr_synchronized') {
          expect(live(v)).toBe(true);
          expect(input.author).not.toBe(BOT);
          if (input.pr !== undefined) expect(v.state.prs).toContain(input.pr);
          if (input.type === 'message' || push) expect(facts.may?.ok).toBe(true);
        }
        // A review's inline comments are read only once its author may drive the agent.
        if (facts.review) expect(facts.may?.ok).toBe(true);
      }),
    );
  });

  it('launches only an open, targeted issue; tells the asker when it is meant for the bot but unusable', () => {
    fc.assert(
      fc.property(view, forge, (v, w) => {
        const e = base({
          kind: 'issue_targeting_changed',
          action: 'labeled',
          issue: { number: 7 },
        });
        const { d } = run(e, v, w);
        const next =
          d.kind === 'input' ? transition(v.state, d.input, { botLogin: BOT }) : undefined;
        const launches = next?.actions.some((a) => a.type === 'launch') ?? false;
        expect(launches).toBe(w.issueState === 'open' && w.targeted && !live(v));
        if (d.kind === 'done' && d.feedback)
          expect(
            w.issueState === 'open' && !w.targeted && !live(v) && w.labelled && w.assigned,
          ).toBe(true);
        if (d.kind === 'input' && d.input.type === 'untargeted') {
          expect(live(v)).toBe(true);
          expect(w.labelled && w.assigned).toBe(false);
        }
      }),
    );
  });

  it('keeps the head a known bottle’s PR was seen at, and says the range of a human push', () => {
    const v: BottleView = {
      issue: 7,
      known: true,
      state: { status: 'frozen', prs: [3], pending: [] },
      heads: { 3: 'aaa' },
    };
    const e = base({
      kind: 'pr_synchronized',
      pr: prRef(3, BOT, 'bbb'),
      sender: { id: 2, login: 'alice' },
    });
    const d = decide(e, { may: { ok: true, why: '' } }, v, {
      botLogin: BOT,
      resumeOnHumanPush: true,
    });
    expect(d.kind).toBe('input');
    if (d.kind !== 'input' || d.input.type !== 'pr_synchronized') throw new Error('no push input');
    expect(d.seen).toEqual({ pr: 3, sha: 'bbb' });
    expect(d.input.prompt).toContain('aaa');
    expect(d.input.prompt).toContain('bbb');
  });
});
