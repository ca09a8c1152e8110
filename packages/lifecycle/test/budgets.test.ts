// Budgets and the loop breaker: a turn that reaches a cap is stopped, frozen with its
// session, recorded with the reason, and the thread told once; the bottle then waits
// for `/bb continue` (any other reply is answered, not obeyed); the org's spent day
// holds new work; other bots never wake an agent; a bottle that keeps taking turns
// without pushing is paused.
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { budgetFor, parseContinue } from '../src/budget';
import { isThreadCommand } from '../src/supervise-thread';
import { OWNER, REPO, setup, until } from './orchestrator-setup';

const bodies = (t: ReturnType<typeof setup>, n: number) =>
  t.world
    .repo(OWNER, REPO)
    .items.get(n)!
    .comments.map((c) => c.body);

/** The credential proxy metered an answer of `tokens` input tokens for `slug`, now. */
function metered(
  t: ReturnType<typeof setup>,
  slug: string,
  tokens: number,
  model = 'claude-sonnet-4-5',
) {
  const line = {
    time: new Date().toISOString(),
    kind: 'credential',
    host: 'api.anthropic.com',
    port: 443,
    decision: 'allowed',
    rule: '/anthropic',
    route: '/anthropic',
    method: 'POST',
    status: 200,
    usage: { model, input: tokens, output: 0, cacheRead: 0, cacheWrite: 0, reported: true },
    bytesUp: 10,
    bytesDown: 10,
    durationMs: 1,
  };
  appendFileSync(join(t.runner.dir(slug), 'state', 'egress.jsonl'), `${JSON.stringify(line)}\n`);
}

/** The sidecar posted `n` comments for `slug`, as its op log says. */
function commented(t: ReturnType<typeof setup>, slug: string, n: number) {
  for (let i = 0; i < n; i++)
    appendFileSync(
      join(t.runner.dir(slug), 'state', 'ops.jsonl'),
      `${JSON.stringify({ seq: i, time: new Date().toISOString(), method: 'post_comment', target: '#1', outcome: 'ok', summary: 'posted', prev: '' })}\n`,
    );
}

describe('budgets', () => {
  it('a turn over its token cap: stopped, frozen, recorded, told once; only /bb continue wakes it, in the same session', async () => {
    const t = setup({ budgets: { defaults: { turnTokens: 5000 } } });
    const { n, slug } = await t.launched();
    metered(t, slug, 3000);
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(slug)).toBe(true);
    metered(t, slug, 3000);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    const [record] = t.records(slug);
    expect(record?.watchdogFired).toMatchObject({ reason: 'budget' });
    expect(record?.watchdogFired?.detail).toContain('6,000 tokens');
    expect(record?.usage).toMatchObject({ input: 6000, output: 0 });
    expect(record?.usage?.costUsd).toBeCloseTo(0.018, 6);
    await until('told', () => bodies(t, n).length === 1);
    expect(bodies(t, n)[0]).toContain('over its budget of 5,000 tokens a turn');
    expect(bodies(t, n)[0]).toContain('Reply /bb continue to have it go on');

    // Any other reply is answered, not obeyed: the agent is not woken.
    await t.orch.accept(t.ev.comment(n, 'what happened?', 11, { on: 'issue' }));
    await until('answered', () => bodies(t, n).length === 2);
    expect(bodies(t, n)[1]).toMatch(/^This agent is paused: it used 6,000 tokens/);
    expect(t.runner.resumes).toHaveLength(0);

    // `/bb continue --budget 20k` wakes it, in the same session, with a larger cap.
    await t.orch.accept(t.ev.comment(n, '/bb continue --budget 20k', 12, { on: 'issue' }));
    await until('resumed', () => t.runner.isRunning(slug));
    expect(t.runner.resumes).toHaveLength(1);
    expect(t.runner.resumes[0]?.freshSession).toBeFalsy();
    metered(t, slug, 15_000);
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(slug)).toBe(true);
    // The grant was for that turn: the next one has the usual cap again.
    t.finish(slug);
    await until('frozen again', () => t.row(n)?.status === 'frozen' && !t.runner.isRunning(slug));
    await t.orch.accept(t.ev.comment(n, 'one more thing', 13, { on: 'issue' }));
    await until('turn 3', () => t.runner.resumes.length === 2 && t.runner.isRunning(slug));
    metered(t, slug, 6000);
    await t.orch.checkWatchdog();
    await until('stopped at the usual cap', () => t.records(slug).length === 3);
    expect(t.records(slug)[2]?.watchdogFired?.detail).toContain('5,000 tokens a turn');
  });

  it('waiting for the operator stops neither the spend count nor the clock of what is spent', async () => {
    let awaiting = true;
    const t = setup({
      budgets: { defaults: { turnTokens: 5000 } },
      supervise: { awaitingOperator: () => awaiting },
    });
    const { n, slug } = await t.launched();
    metered(t, slug, 6000);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.records(slug)[0]?.watchdogFired).toMatchObject({ reason: 'budget' });
    awaiting = false;
  });

  it('the day counts every running turn: two bottles cannot each spend what is left of it', async () => {
    const t = setup({ budgets: { dayTokens: 10_000 } });
    const a = await t.launched('first');
    const b = await t.launched('second');
    metered(t, a.slug, 6000);
    metered(t, b.slug, 6000);
    await t.orch.checkWatchdog();
    await until(
      'both stopped',
      () => t.row(a.n)?.status === 'frozen' && t.row(b.n)?.status === 'frozen',
    );
  });

  it('a comment that came in during a turn stopped at a cap does not wake it when the turn ends', async () => {
    const t = setup({ budgets: { defaults: { turnTokens: 5000 } } });
    const { n, slug } = await t.launched();
    await t.orch.accept(t.ev.comment(n, 'also fix the docs', 71, { on: 'issue' }));
    await t.orch.idle();
    metered(t, slug, 6000);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await until('told it is paused', () =>
      bodies(t, n).some((b) => b.startsWith('This agent is paused')),
    );
    await t.orch.idle();
    expect(t.runner.resumes).toHaveLength(0);
    expect(t.row(n)?.status).toBe('frozen');
    // Heard, not lost: nothing waits in the inbox for a turn that will not come.
    expect((await t.store.openEvents()).filter((e) => e.issue === `${OWNER}/${REPO}#${n}`)).toEqual(
      [],
    );
  });

  it('a turn past its wall time is stopped and the thread told', async () => {
    const t = setup({ budgets: { defaults: { turnMinutes: 0.001 } } });
    const { n, slug } = await t.launched();
    await new Promise((r) => setTimeout(r, 100));
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.records(slug)[0]?.watchdogFired).toMatchObject({ reason: 'wall_time' });
    await until('told', () => bodies(t, n).length === 1);
    expect(bodies(t, n)[0]).toMatch(
      /stopped the agent's turn: it ran for \d s, over its limit of 0 s a turn/,
    );
  });

  it("a bottle over its issue's cost cap does not start another turn until told to go on", async () => {
    const t = setup({ budgets: { defaults: { issueUsd: 0.01 } } });
    const { n, slug } = await t.launched();
    metered(t, slug, 5000); // $0.015 at Sonnet's price
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.records(slug)[0]?.watchdogFired?.detail).toContain('$0.01 for this issue');
    await until('told', () => bodies(t, n).length === 1);
    await t.orch.accept(t.ev.comment(n, '/bb continue', 21, { on: 'issue' }));
    await until('resumed', () => t.runner.isRunning(slug));
    // Counted afresh from the continue: the turn runs on.
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(slug)).toBe(true);
  });

  it("with the org's daily budget spent, a new issue waits and is told why", async () => {
    const t = setup({ budgets: { dayTokens: 4000 } });
    const first = await t.launched();
    metered(t, first.slug, 5000);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(first.n)?.status === 'frozen');
    expect(t.records(first.slug)[0]?.watchdogFired?.detail).toContain(
      "the organisation's daily budget",
    );
    const n = t.issue('another');
    await t.orch.accept(t.ev.targeted(n));
    await until('told', () => bodies(t, n).length === 1);
    expect(bodies(t, n)[0]).toMatch(/^This waits: the agents used 5,000 tokens today/);
    expect(t.row(n)).toBeUndefined();
  });

  it('a turn that posts more comments than its limit is stopped as a loop', async () => {
    const t = setup({ budgets: { maxTurnComments: 3 } });
    const { n, slug } = await t.launched();
    commented(t, slug, 4);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.records(slug)[0]?.watchdogFired).toMatchObject({ reason: 'loop' });
    expect(t.records(slug)[0]?.watchdogFired?.detail).toBe(
      'it posted 4 comments in one turn (the limit is 3)',
    );
  });

  it('turns in a row without a push: paused, the thread asked, woken again by /bb continue', async () => {
    const t = setup({ budgets: { maxIdleTurns: 2 } });
    const { n, slug } = await t.launched();
    t.finish(slug);
    await until('frozen 1', () => t.row(n)?.status === 'frozen');
    await t.orch.accept(t.ev.comment(n, 'again', 31, { on: 'issue' }));
    await until('turn 2', () => t.runner.isRunning(slug));
    t.finish(slug);
    await until('paused', () =>
      bodies(t, n).some((b) => b.includes('2 turns in a row without pushing')),
    );
    await until('frozen 2', () => t.row(n)?.status === 'frozen');
    await t.orch.accept(t.ev.comment(n, 'and again', 32, { on: 'issue' }));
    await until('answered', () => bodies(t, n).some((b) => b.startsWith('This agent is paused')));
    expect(t.runner.resumes).toHaveLength(1);
    await t.orch.accept(t.ev.comment(n, '/bb continue', 33, { on: 'issue' }));
    await until('turn 3', () => t.runner.resumes.length === 2);
  });

  it('with mention-only on, /bb continue is heard without a mention', async () => {
    const t = setup({ mentionOnly: true, budgets: { defaults: { turnTokens: 1000 } } });
    const { n, slug } = await t.launched();
    metered(t, slug, 2000);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await t.orch.accept(t.ev.comment(n, '/bb continue', 45, { on: 'issue' }));
    await until('resumed', () => t.runner.resumes.length === 1);
  });

  it("with the policy 'reply', any reply wakes a paused bottle", async () => {
    const t = setup({ budgets: { defaults: { turnTokens: 1000 }, resume: 'reply' } });
    const { n, slug } = await t.launched();
    metered(t, slug, 2000);
    await t.orch.checkWatchdog();
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await t.orch.accept(t.ev.comment(n, 'go on', 41, { on: 'issue' }));
    await until('resumed', () => t.runner.resumes.length === 1);
  });
});

describe('the loop breaker', () => {
  it('a forge user listed as a bot never wakes an agent; the same comment from a person does', async () => {
    const t = setup({ ignoreUsers: ['ci-bot'] });
    t.world.grant(OWNER, REPO, 'ci-bot', 'write');
    const { n, slug } = await t.launched();
    t.finish(slug);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await t.orch.accept(t.ev.comment(n, 'build failed', 51, { author: 'ci-bot', on: 'issue' }));
    await t.orch.idle();
    expect(t.runner.resumes).toHaveLength(0);
    await t.orch.accept(t.ev.comment(n, 'build failed', 52, { on: 'issue' }));
    await until('resumed', () => t.runner.resumes.length === 1);
  });

  it("the bot's own comment never wakes its agent", async () => {
    const t = setup();
    t.world.grant(OWNER, REPO, 'bb-bot', 'write');
    const { n, slug } = await t.launched();
    t.finish(slug);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await t.orch.accept(t.ev.comment(n, 'I pushed a fix', 61, { author: 'bb-bot', on: 'issue' }));
    await t.orch.idle();
    expect(t.runner.resumes).toHaveLength(0);
  });
});

describe('/bb continue', () => {
  it('reads a budget in tokens, dollars or minutes, and names what it cannot read', () => {
    expect(parseContinue('/bb continue')).toEqual({ grant: {} });
    expect(parseContinue('/bb continue --budget 500k')).toEqual({ grant: { tokens: 500_000 } });
    expect(parseContinue('/bb continue --budget 2m')).toEqual({ grant: { tokens: 2_000_000 } });
    expect(parseContinue('/bb continue --budget $5')).toEqual({ grant: { usd: 5 } });
    expect(parseContinue('/bb continue --budget=90min')).toEqual({ grant: { minutes: 90 } });
    expect(parseContinue('/bb continue --budget lots')).toMatchObject({
      error: expect.stringContaining('cannot read the budget "lots"'),
    });
    expect(parseContinue('please /bb continue')).toBeUndefined();
    expect(parseContinue('/bb approve sr_1')).toBeUndefined();
    // It wakes the agent: the supervise desk, which takes the other /bb commands, leaves it.
    expect(isThreadCommand('/bb continue --budget 5k')).toBe(false);
    expect(isThreadCommand('/bb approve sr_1')).toBe(true);
  });

  it("a grant sets the next turn's caps and the issue's afresh; the manifest's are over the defaults", () => {
    expect(budgetFor({ defaults: { turnTokens: 10 } }, { turnTokens: 20 }, undefined)).toEqual({
      turnTokens: 20,
    });
    expect(
      budgetFor({ defaults: { turnTokens: 10, issueTokens: 50 } }, undefined, { tokens: 99 }),
    ).toEqual({ turnTokens: 99, issueTokens: 99 });
    expect(budgetFor(undefined, undefined, undefined)).toEqual({ turnMinutes: 120 });
  });
});
