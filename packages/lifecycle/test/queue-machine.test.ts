import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  INITIAL,
  type LifecycleAction,
  type LifecycleContext,
  type LifecycleInput,
  type LifecycleState,
  transition,
} from '../src/machine';
import { SerialQueue } from '../src/serial-queue';

const ctx: LifecycleContext = { botLogin: 'bb-claude' };
/** Launched; PR `pr` opened by `author`; the agent's turn over. */
const launchedWithPr = (pr: number, author: string): LifecycleInput[] => [
  { type: 'targeted' },
  { type: 'pr_opened', pr, author },
  { type: 'agent_stopped' },
];
const run = (inputs: LifecycleInput[], c = ctx) => {
  let state = INITIAL;
  const actions: LifecycleAction[] = [];
  for (const i of inputs) {
    const r = transition(state, i, c);
    state = r.state;
    actions.push(...r.actions.filter((a) => a.type !== 'log'));
  }
  return { state, actions };
};

describe('SerialQueue', () => {
  it('runs one key at a time in timestamp order, keys in parallel up to the limit, and survives errors', async () => {
    const log: string[] = [];
    let active = 0;
    let peak = 0;
    const q = new SerialQueue<{ at: number; name: string }>(
      2,
      async (key, item) => {
        active++;
        peak = Math.max(peak, active);
        log.push(`${key}:${item.name}:start`);
        await new Promise((r) => setTimeout(r, 10));
        log.push(`${key}:${item.name}:end`);
        active--;
        if (item.name === 'boom') throw new Error('boom');
      },
      () => {},
      (a, b) => a.at - b.at,
    );
    q.push('a', { at: 1, name: 'a1' });
    q.push('a', { at: 3, name: 'a3' });
    q.push('a', { at: 2, name: 'a2' }); // arrived late, runs before a3
    q.push('b', { at: 1, name: 'boom' });
    q.push('b', { at: 2, name: 'b2' });
    q.push('c', { at: 1, name: 'c1' });
    await q.idle();
    const order = (k: string) =>
      log.filter((l) => l.startsWith(`${k}:`) && l.endsWith(':start')).map((l) => l.split(':')[1]);
    expect(order('a')).toEqual(['a1', 'a2', 'a3']);
    expect(order('b')).toEqual(['boom', 'b2']);
    expect(peak).toBe(2);
    for (const k of ['a', 'b']) {
      const seq = log.filter((l) => l.startsWith(`${k}:`));
      for (let i = 0; i < seq.length; i += 2)
        expect(seq[i + 1]).toBe(seq[i]!.replace('start', 'end'));
    }
  });
});

describe('lifecycle state machine', () => {
  it('runs the whole story: launch, done, human comment resumes, merge destroys', () => {
    const r = run([
      ...launchedWithPr(18, 'bb-claude'),
      { type: 'pr_comment', pr: 18, author: 'bb-claude', body: 'PR is up' },
      { type: 'pr_comment', pr: 18, author: 'alice', body: 'add a test' },
      { type: 'agent_stopped' },
      { type: 'pr_closed', pr: 18, merged: true },
    ]);
    expect(r.actions).toEqual([
      { type: 'launch' },
      { type: 'freeze' },
      { type: 'resume', prompt: 'add a test' },
      { type: 'freeze' },
      { type: 'destroy' },
    ]);
    expect(r.state.status).toBe('destroyed');
  });

  it('queues comments that arrive while running and delivers them after the freeze', () => {
    const r = run([
      { type: 'targeted' },
      { type: 'pr_opened', pr: 18, author: 'bb-claude' },
      { type: 'pr_comment', pr: 18, author: 'alice', body: 'one' },
      { type: 'pr_comment', pr: 18, author: 'bob', body: 'two' },
      { type: 'watchdog', reason: 'silence' },
    ]);
    expect(r.actions).toEqual([
      { type: 'launch' },
      { type: 'freeze', watchdog: 'silence' },
      { type: 'resume', prompt: 'one\n\ntwo' },
    ]);
  });

  it('an issue closed with no open PR destroys its bottle (a running one after its turn is stopped and recorded); with an open PR the PR decides', () => {
    expect(
      run([
        { type: 'targeted' },
        { type: 'agent_stopped' },
        { type: 'issue_closed', openPr: false },
      ]).actions,
    ).toEqual([{ type: 'launch' }, { type: 'freeze' }, { type: 'destroy' }]);
    expect(
      run([
        { type: 'targeted' },
        { type: 'issue_closed', openPr: false },
        { type: 'message', author: 'alice', prompt: 'too late' },
        { type: 'agent_stopped' },
      ]).actions,
    ).toEqual([
      { type: 'launch' },
      {
        type: 'stop',
        reason: 'closed',
        graceMs: 0,
        why: 'its issue was closed (with no open PR) while the agent worked',
      },
      { type: 'freeze' },
      { type: 'destroy' },
    ]);
    expect(
      run([...launchedWithPr(3, 'bb-claude'), { type: 'issue_closed', openPr: true }]).actions,
    ).toEqual([{ type: 'launch' }, { type: 'freeze' }]);
  });

  it('a reply on the issue wakes a frozen bottle, PR or not, and waits behind a running turn', () => {
    const r = run([
      { type: 'targeted' },
      { type: 'agent_stopped' },
      { type: 'message', author: 'alice', prompt: 'alice replied: use tabs' },
      { type: 'message', author: 'bb-claude', prompt: 'my own comment' },
      { type: 'message', author: 'bob', prompt: 'bob: and tests' },
      { type: 'done_signalled' },
      { type: 'agent_stopped' },
    ]);
    expect(r.actions).toEqual([
      { type: 'launch' },
      { type: 'freeze' },
      { type: 'resume', prompt: 'alice replied: use tabs' },
      { type: 'stop', reason: 'done', graceMs: 10_000 },
      { type: 'freeze' },
      { type: 'resume', prompt: 'bob: and tests' },
    ]);
  });

  it('taking the issue back stops a running bottle and keeps it frozen until it is targeted again', () => {
    const r = run([
      { type: 'targeted' },
      { type: 'message', author: 'alice', prompt: 'queued' },
      { type: 'untargeted', why: 'the agent label was removed' },
      { type: 'message', author: 'alice', prompt: 'ignored while untargeted' },
      { type: 'watchdog', reason: 'stopped' },
      { type: 'message', author: 'alice', prompt: 'still ignored' },
      { type: 'targeted' },
      { type: 'message', author: 'alice', prompt: 'heard again' },
    ]);
    expect(r.actions).toEqual([
      { type: 'launch' },
      { type: 'stop', reason: 'untargeted', graceMs: 0, why: 'the agent label was removed' },
      { type: 'freeze', watchdog: 'stopped' },
      { type: 'resume', prompt: 'heard again' },
    ]);
  });

  it('ignores other PRs and the bot’s own pushes', () => {
    const r = run([
      ...launchedWithPr(5, 'alice'),
      { type: 'pr_comment', pr: 5, author: 'alice', body: 'x' },
      { type: 'pr_closed', pr: 5, merged: false },
    ]);
    expect(r.actions).toEqual([{ type: 'launch' }, { type: 'freeze' }]);
    /** A push by `author` to the bot's frozen PR, with resume-on-push on. */
    const pushBy = (author: string) =>
      run([...launchedWithPr(7, 'bb-claude'), { type: 'pr_synchronized', pr: 7, author }], {
        ...ctx,
        resumeOnHumanPush: true,
      });
    expect(pushBy('bb-claude').actions).toEqual([{ type: 'launch' }, { type: 'freeze' }]);
    const human = pushBy('alice');
    expect(human.actions.at(-1)).toMatchObject({ type: 'resume' });
  });

  it('ends a turn on signal_done after the grace, and a PR closed mid-turn stops, records, then destroys', () => {
    const done = run(
      [
        { type: 'targeted' },
        { type: 'done_signalled' },
        { type: 'agent_stopped' },
        { type: 'done_signalled' },
      ],
      { ...ctx, doneGraceMs: 2500 },
    );
    expect(done.actions).toEqual([
      { type: 'launch' },
      { type: 'stop', reason: 'done', graceMs: 2500 },
      { type: 'freeze' },
    ]);
    const closed = run([
      { type: 'targeted' },
      { type: 'pr_opened', pr: 4, author: 'bb-claude' },
      { type: 'pr_comment', pr: 4, author: 'alice', body: 'wait' },
      { type: 'pr_closed', pr: 4, merged: false },
      { type: 'pr_comment', pr: 4, author: 'alice', body: 'too late' },
      { type: 'pr_closed', pr: 4, merged: false },
      { type: 'watchdog', reason: 'closed' },
    ]);
    expect(closed.actions).toEqual([
      { type: 'launch' },
      { type: 'stop', reason: 'closed', graceMs: 0 },
      { type: 'freeze', watchdog: 'closed' },
      { type: 'destroy' },
    ]);
    expect(closed.state).toMatchObject({ status: 'destroyed', pending: [] });
  });

  // Model-based: random command sequences against a model that states the rules
  // from the user's side, checked after every step.
  it('keeps its promises under any sequence of events (fast-check commands)', () => {
    interface Model {
      bottle: 'none' | 'running' | 'frozen' | 'destroyed';
      prs: Set<number>;
      waiting: string[];
    }
    interface Real {
      state: LifecycleState;
      actions: LifecycleAction[];
    }
    const step = (m: Model, r: Real, input: LifecycleInput) => {
      const before = r.state;
      const out = transition(r.state, input, ctx);
      r.state = out.state;
      const acts = out.actions.filter((a) => a.type !== 'log');
      r.actions.push(...acts);
      // Promises: a launch only from no bottle or a destroyed one; a resume only right after
      // a freeze or from frozen; nothing after destroy but a new launch; bot comments never act.
      for (const a of acts) {
        if (a.type === 'launch') expect(['none', 'destroyed']).toContain(before.status);
        if (a.type === 'destroy') expect(['running', 'frozen']).toContain(before.status);
      }
      if (input.type === 'pr_comment' && input.author === ctx.botLogin) expect(acts).toEqual([]);
      if (before.status === 'destroyed' && input.type !== 'targeted') expect(acts).toEqual([]);
      const resumeIdx = acts.findIndex((a) => a.type === 'resume');
      if (resumeIdx > 0) expect(acts[resumeIdx - 1]!.type).toBe('freeze');
      if (resumeIdx === 0) expect(before.status).toBe('frozen');
      // done ends the turn (a stop after the grace); a close of our PR mid-turn stops at once,
      // and the bottle then goes without resuming.
      if (input.type === 'done_signalled')
        expect(acts).toEqual(
          before.status === 'running' ? [{ type: 'stop', reason: 'done', graceMs: 10_000 }] : [],
        );
      if (
        input.type === 'pr_closed' &&
        before.status === 'running' &&
        before.prs.includes(input.pr)
      )
        expect(acts).toEqual(
          before.closing ? [] : [{ type: 'stop', reason: 'closed', graceMs: 0 }],
        );
      if (before.closing && (input.type === 'agent_stopped' || input.type === 'watchdog'))
        expect(acts.map((a) => a.type)).toEqual(['freeze', 'destroy']);
      if (before.closing || r.state.closing)
        expect(acts.some((a) => a.type === 'resume')).toBe(false);
      // A human comment on our PR while running is never lost: it is pending until delivered
      // (or its bottle is going: its PR was closed).
      if (
        input.type === 'pr_comment' &&
        input.author !== ctx.botLogin &&
        before.prs.includes(input.pr) &&
        before.status === 'running' &&
        !before.closing
      ) {
        m.waiting.push(input.body);
      }
      const delivered = acts.find((a) => a.type === 'resume') as { prompt: string } | undefined;
      if (delivered) m.waiting = m.waiting.filter((w) => !delivered.prompt.includes(w));
      if (r.state.status === 'destroyed' || r.state.closing) m.waiting = [];
      expect(r.state.pending).toEqual(m.waiting);
    };
    const cmd = (input: LifecycleInput): fc.Command<Model, Real> => ({
      check: () => true,
      run: (m, r) => step(m, r, input),
      toString: () => JSON.stringify(input),
    });
    const pr = fc.integer({ min: 1, max: 3 });
    const who = fc.constantFrom('bb-claude', 'alice');
    const commands = [
      fc.constant(cmd({ type: 'targeted' })),
      fc.constant(cmd({ type: 'agent_stopped' })),
      fc.constant(cmd({ type: 'done_signalled' })),
      fc.constant(cmd({ type: 'watchdog', reason: 'silence' })),
      fc.boolean().map((openPr) => cmd({ type: 'issue_closed', openPr })),
      fc.tuple(pr, who).map(([p, a]) => cmd({ type: 'pr_opened', pr: p, author: a })),
      fc
        .tuple(pr, who, fc.string({ minLength: 1, maxLength: 5 }))
        .map(([p, a, b]) => cmd({ type: 'pr_comment', pr: p, author: a, body: `c-${b}` })),
      fc.tuple(pr, fc.boolean()).map(([p, merged]) => cmd({ type: 'pr_closed', pr: p, merged })),
    ];
    fc.assert(
      fc.property(fc.commands(commands, { maxCommands: 40 }), (cmds) => {
        fc.modelRun(
          () => ({
            model: { bottle: 'none', prs: new Set<number>(), waiting: [] } as Model,
            real: { state: INITIAL, actions: [] } as Real,
          }),
          cmds,
        );
      }),
      { numRuns: 500 },
    );
  });
});
