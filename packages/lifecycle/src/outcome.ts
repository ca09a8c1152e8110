/**
 * What the people on a thread are told when an agent's turn ends without
 * `signal_done`: what happened, in plain words, whether the work was kept, and
 * how to go on. Never the run record: that stays behind the API.
 */
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
      return `The agent's container was gone before its turn ended. ${kept} ${reply}`;
    case 'stopped':
      return `bot-bottle stopped the agent: ${fired.detail}. ${kept} To go on, give the issue back to the bot (the bot-bottle:${c.agent} label, assigned to the bot).`;
    default:
      return `The agent stopped${c.exitCode === null ? '' : ` (exit code ${c.exitCode})`} without saying it was done. ${kept} ${reply}`;
  }
}

/** The comment for an event bot-bottle gave up on after its retries. */
export function gaveUpMessage(what: string, tries: number, error: string): string {
  return `bot-bottle could not act on ${what} after ${tries} tries (${error}). Comment again, or give the issue back to the bot, to have it try again.`;
}
