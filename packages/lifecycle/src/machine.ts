/**
 * The forge-driven lifecycle of one issue's bottle, as a pure function: no I/O,
 * so every rule is testable on its own and by model-based tests.
 */

export type LifecycleStatus = 'none' | 'running' | 'frozen' | 'destroyed';

export interface LifecycleState {
  status: LifecycleStatus;
  /** PRs the bottle opened (its write scope beyond the issue). */
  prs: number[];
  /** Human comments that arrived while the agent was running, delivered after it stops. */
  pending: string[];
  /** Its PR (or its PR-less issue) was closed while the agent worked: the turn is being stopped, then the bottle goes. */
  closing?: boolean;
  /**
   * A person took the issue back from the bot (removed the agent label, unassigned
   * the bot): the bottle is stopped and frozen, and nothing but targeting it again
   * wakes it.
   */
  untargeted?: boolean;
}

/** Why the watchdog (or a restart's reconcile) stopped an agent. */
export type WatchdogReason =
  | 'silence'
  | 'exit_without_signal'
  | 'sidecar_death'
  | 'vanished'
  | 'closed'
  | 'stopped'
  /** A turn ran past its wall-time cap. */
  | 'wall_time'
  /** A token or cost cap (the turn's, the or the org's day) was reached. */
  | 'budget'
  /** The loop breaker: too many comments in a turn, or turns without a push. */
  | 'loop';

export type LifecycleInput =
  | { type: 'targeted' }
  /** The agent said it is done (`signal_done`) and is still running. */
  | { type: 'done_signalled' }
  /** The turn ended: the agent exited after signalling done. */
  | { type: 'agent_stopped' }
  | { type: 'watchdog'; reason: WatchdogReason }
  | { type: 'pr_opened'; pr: number; author: string }
  | { type: 'pr_comment'; pr: number; author: string; body: string }
  /**
   * A person wrote to the agent: a reply on its issue (`pr` absent), or a
   * comment or review on one of its PRs. `prompt` is what the agent is told.
   */
  | { type: 'message'; pr?: number | undefined; author: string; prompt: string }
  | { type: 'pr_synchronized'; pr: number; author: string; prompt?: string }
  | { type: 'pr_closed'; pr: number; merged: boolean }
  /** The issue was closed; `openPr` says whether one of the bottle's PRs is still open. */
  | { type: 'issue_closed'; openPr: boolean }
  /** The issue is no longer targeted (agent label removed, bot unassigned). */
  | { type: 'untargeted'; why: string };

export type LifecycleAction =
  | { type: 'launch' }
  /** Stop the running agent (after `graceMs`): its turn then ends the ordinary way. */
  | { type: 'stop'; reason: 'done' | 'closed' | 'untargeted'; graceMs: number; why?: string }
  | { type: 'freeze'; watchdog?: WatchdogReason }
  | { type: 'resume'; prompt: string }
  | { type: 'destroy' }
  | { type: 'log'; message: string };

export interface LifecycleContext {
  /** The bot's own forge login: its comments and pushes never wake the bottle. */
  botLogin: string;
  /** Resume when a human pushes to the PR. @default false */
  resumeOnHumanPush?: boolean;
  /** How long an agent that signalled done may take to exit before it is stopped. @default 10000 */
  doneGraceMs?: number;
}

export const INITIAL: LifecycleState = { status: 'none', prs: [], pending: [] };

const log = (message: string): LifecycleAction => ({ type: 'log', message });

/** Apply one input; returns the next state and the actions to carry out, in order. */
export function transition(
  state: LifecycleState,
  input: LifecycleInput,
  ctx: LifecycleContext,
): { state: LifecycleState; actions: LifecycleAction[] } {
  const s = state;
  const same = (message: string) => ({ state: s, actions: [log(message)] });
  switch (input.type) {
    case 'targeted':
      if (s.status === 'none' || s.status === 'destroyed')
        return {
          state: { status: 'running', prs: [], pending: [] },
          actions: [{ type: 'launch' }],
        };
      if (s.untargeted) {
        const { untargeted: _, ...rest } = s;
        return {
          state: rest,
          actions: [log(`targeted again while ${s.status}: replies wake it again`)],
        };
      }
      return same(`already ${s.status}: nothing to launch`);
    case 'done_signalled':
      if (s.status !== 'running') return same(`done signalled while ${s.status}: ignored`);
      return {
        state: s,
        actions: [{ type: 'stop', reason: 'done', graceMs: ctx.doneGraceMs ?? 10_000 }],
      };
    case 'agent_stopped':
    case 'watchdog': {
      if (s.status !== 'running') return same(`${input.type} while ${s.status}: ignored`);
      const freeze: LifecycleAction =
        input.type === 'watchdog' ? { type: 'freeze', watchdog: input.reason } : { type: 'freeze' };
      // Its PR closed while it worked: the turn is recorded, then the bottle goes.
      if (s.closing)
        return {
          state: { status: 'destroyed', prs: s.prs, pending: [] },
          actions: [freeze, { type: 'destroy' }],
        };
      if (s.pending.length === 0) return { state: { ...s, status: 'frozen' }, actions: [freeze] };
      // Comments that came in while it worked: delivered now, in order, as one prompt.
      return {
        state: { ...s, status: 'running', pending: [] },
        actions: [freeze, { type: 'resume', prompt: s.pending.join('\n\n') }],
      };
    }
    case 'pr_opened':
      if (s.status !== 'running' && s.status !== 'frozen')
        return same(`PR #${input.pr} opened while ${s.status}: ignored`);
      if (input.author !== ctx.botLogin)
        return same(`PR #${input.pr} was opened by ${input.author}, not the bot: not in scope`);
      return {
        state: { ...s, prs: s.prs.includes(input.pr) ? s.prs : [...s.prs, input.pr] },
        actions: [],
      };
    case 'pr_comment':
      return message(s, { pr: input.pr, author: input.author, prompt: input.body }, ctx);
    case 'message':
      return message(s, input, ctx);
    case 'pr_synchronized':
      if (input.author === ctx.botLogin || !s.prs.includes(input.pr))
        return same(`push to #${input.pr} by ${input.author}: not a trigger`);
      if (!ctx.resumeOnHumanPush)
        return same(`human push to #${input.pr}: resuming on pushes is off`);
      return message(
        s,
        {
          pr: input.pr,
          author: input.author,
          prompt:
            input.prompt ??
            `New commits were pushed to PR #${input.pr} by ${input.author}. Review them and continue.`,
        },
        ctx,
      );
    case 'pr_closed':
      if (!s.prs.includes(input.pr)) return same(`PR #${input.pr} closed: not this bottle's`);
      if (s.status === 'running') {
        if (s.closing) return same(`PR #${input.pr} closed: already stopping`);
        // Interrupt: stop the agent now; its turn is recorded, then the bottle goes.
        return {
          state: { ...s, closing: true, pending: [] },
          actions: [{ type: 'stop', reason: 'closed', graceMs: 0 }],
        };
      }
      if (s.status === 'frozen')
        return {
          state: { ...s, status: 'destroyed', pending: [] },
          actions: [{ type: 'destroy' }],
        };
      return same(`PR #${input.pr} closed while ${s.status}: nothing to destroy`);
    case 'issue_closed':
      if (s.status !== 'running' && s.status !== 'frozen')
        return same(`issue closed while ${s.status}: nothing to do`);
      if (input.openPr) return same('issue closed: its open PR decides the bottle’s end');
      // No open PR will ever wake it: the bottle goes (a running turn is stopped and recorded first).
      if (s.status === 'running') {
        if (s.closing) return same('issue closed: already stopping');
        return {
          state: { ...s, closing: true, pending: [] },
          actions: [
            {
              type: 'stop',
              reason: 'closed',
              graceMs: 0,
              why: 'its issue was closed (with no open PR) while the agent worked',
            },
          ],
        };
      }
      return {
        state: { ...s, status: 'destroyed', pending: [] },
        actions: [{ type: 'destroy' }],
      };
    case 'untargeted':
      if (s.status === 'running' && !s.closing && !s.untargeted)
        return {
          state: { ...s, untargeted: true, pending: [] },
          actions: [{ type: 'stop', reason: 'untargeted', graceMs: 0, why: input.why }],
        };
      if (s.status === 'frozen' && !s.untargeted)
        return { state: { ...s, untargeted: true, pending: [] }, actions: [log(input.why)] };
      return same(`${input.why} (bottle ${s.status}): nothing more to stop`);
  }
}

/** A person's message to the agent: wakes a frozen bottle, waits behind a running turn. */
function message(
  s: LifecycleState,
  m: { pr?: number | undefined; author: string; prompt: string },
  ctx: LifecycleContext,
): { state: LifecycleState; actions: LifecycleAction[] } {
  const where = m.pr === undefined ? 'the issue' : `#${m.pr}`;
  const same = (message: string) => ({ state: s, actions: [log(message)] });
  if (m.author === ctx.botLogin)
    return same(`message by the bot itself on ${where}: never a trigger`);
  if (m.pr !== undefined && !s.prs.includes(m.pr))
    return same(`message on #${m.pr}, which is not this bottle's PR`);
  if (s.untargeted)
    return same(
      `message on ${where}: the issue is no longer targeted, so it does not wake the bottle`,
    );
  if (s.status === 'frozen')
    return {
      state: { ...s, status: 'running' },
      actions: [{ type: 'resume', prompt: m.prompt }],
    };
  if (s.status === 'running' && s.closing)
    return same(`message on ${where} while its bottle is being destroyed: ignored`);
  if (s.status === 'running')
    return {
      state: { ...s, pending: [...s.pending, m.prompt] },
      actions: [log(`message on ${where} queued until the agent stops`)],
    };
  return same(`message on ${where} while ${s.status}: ignored`);
}
