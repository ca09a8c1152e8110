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
  /** Its PR was closed while the agent worked: the turn is being stopped, then the bottle goes. */
  closing?: boolean;
}

/** Why the watchdog (or a restart's reconcile) stopped an agent. */
export type WatchdogReason =
  | 'silence'
  | 'exit_without_signal'
  | 'sidecar_death'
  | 'vanished'
  | 'closed';

export type LifecycleInput =
  | { type: 'targeted' }
  /** The agent said it is done (`signal_done`) and is still running. */
  | { type: 'done_signalled' }
  /** The turn ended: the agent exited after signalling done. */
  | { type: 'agent_stopped' }
  | { type: 'watchdog'; reason: WatchdogReason }
  | { type: 'pr_opened'; pr: number; author: string }
  | { type: 'pr_comment'; pr: number; author: string; body: string }
  | { type: 'pr_synchronized'; pr: number; author: string }
  | { type: 'pr_closed'; pr: number; merged: boolean }
  | { type: 'issue_closed' };

export type LifecycleAction =
  | { type: 'launch' }
  /** Stop the running agent (after `graceMs`): its turn then ends the ordinary way. */
  | { type: 'stop'; reason: 'done' | 'closed'; graceMs: number }
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
    case 'pr_comment': {
      if (input.author === ctx.botLogin)
        return same(`comment by the bot itself on #${input.pr}: never a trigger`);
      if (!s.prs.includes(input.pr))
        return same(`comment on #${input.pr}, which is not this bottle's PR`);
      if (s.status === 'frozen')
        return {
          state: { ...s, status: 'running' },
          actions: [{ type: 'resume', prompt: input.body }],
        };
      if (s.status === 'running' && s.closing)
        return same(`comment on #${input.pr} while its bottle is being destroyed: ignored`);
      if (s.status === 'running')
        return {
          state: { ...s, pending: [...s.pending, input.body] },
          actions: [log(`comment on #${input.pr} queued until the agent stops`)],
        };
      return same(`comment on #${input.pr} while ${s.status}: ignored`);
    }
    case 'pr_synchronized':
      if (input.author === ctx.botLogin || !s.prs.includes(input.pr))
        return same(`push to #${input.pr} by ${input.author}: not a trigger`);
      if (!ctx.resumeOnHumanPush)
        return same(`human push to #${input.pr}: resuming on pushes is off`);
      if (s.status === 'frozen')
        return {
          state: { ...s, status: 'running' },
          actions: [
            {
              type: 'resume',
              prompt: `New commits were pushed to PR #${input.pr}. Review them and continue.`,
            },
          ],
        };
      if (s.status === 'running')
        return {
          state: { ...s, pending: [...s.pending, `New commits were pushed to PR #${input.pr}.`] },
          actions: [],
        };
      return same(`push to #${input.pr} while ${s.status}: ignored`);
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
      if (s.prs.length === 0 && (s.status === 'running' || s.status === 'frozen')) {
        return same('issue closed without a PR: ambiguous, so nothing is destroyed');
      }
      return same('issue closed: the PR decides the bottle’s end');
  }
}
