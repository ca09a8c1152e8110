/**
 * What the people on a thread are told when an agent's turn ends without
 * `signal_done`: what happened, in plain words, whether the work was kept, and
 * how to go on. Never the run record: that stays behind the API.
 */
import type { ForgeEvent } from '@bb/forge';
import { CONTINUE_HINT } from './budget';
import type { Fired } from './session';

export interface OutcomeContext {
  /** The agent's exit code, when it exited. */
  exitCode: number | null;
  /** Only messages mentioning the bot wake it. */
  mentionOnly: boolean;
  botLogin: string;
  /** The agent's name, as its label names it. */
  agent: string;
}

/** The comment for a turn that ended without `signal_done`, for `fired`'s reason. */
export function turnOutcomeMessage(fired: Fired, c: OutcomeContext): string {
  const kept = 'Its work so far is kept: the bottle is frozen with its workspace and conversation.';
  const reply = `Reply here${c.mentionOnly ? ` mentioning @${c.botLogin}` : ''} to have it carry on.`;
  switch (fired.reason) {
    case 'silence':
      return `The agent went quiet (${fired.detail}), so bot-bottle stopped its turn. ${kept} ${reply}`;
    case 'sidecar_death':
      return `The agent lost its connection to the forge (${fired.detail}), so bot-bottle stopped its turn. ${kept} ${reply}`;
    case 'vanished':
      return fired.lostWith
        ? `The machine running the agent stopped before its turn ended, and another has taken the issue over. ${kept} ${reply}`
        : `The agent's container was gone before its turn ended. ${kept} ${reply}`;
    case 'wall_time':
    case 'budget':
    case 'loop':
      return `bot-bottle stopped the agent's turn: ${fired.detail}. ${kept} ${CONTINUE_HINT}`;
    case 'stopped':
      return `bot-bottle stopped the agent: ${fired.detail}. ${kept} To go on, give the issue back to the bot (the bot-bottle:${c.agent} label, assigned to the bot).`;
    default:
      return `The agent stopped${c.exitCode === null ? '' : ` (exit code ${c.exitCode})`} without saying it was done. ${kept} ${reply}`;
  }
}

/** An event, as the people on its thread would name it. */
function whatOf(event: ForgeEvent): string {
  switch (event.kind) {
    case 'comment_created':
      return `the comment by ${event.comment.author}`;
    case 'review_submitted':
      return `the review by ${event.author}`;
    case 'issue_targeting_changed':
      return 'the request to start the agent';
    case 'pr_synchronized':
      return `the push to PR #${event.pr.number}`;
    case 'pr_closed':
      return `the closing of PR #${event.pr.number}`;
    default:
      return `the ${String(event.kind).replaceAll('_', ' ')}`;
  }
}

/**
 * The comment for an event bot-bottle gave up on after its retries. The error
 * itself stays in the orchestrator's log: it may name internal hosts and paths.
 */
export function gaveUpMessage(event: ForgeEvent, tries: number): string {
  return `bot-bottle could not act on ${whatOf(event)} after ${tries} tries (the operator's log has the error). Comment again, or give the issue back to the bot, to have it try again.`;
}
