/**
 * One forge event on its issue's queue: what this process holds of the bottle
 * is brought up to date, the facts the decision needs are read from the forge
 * once, `decide` turns them into the machine's input, and the machine's
 * actions are carried out (a launch or a resume waits for room first).
 */
import type { ForgeEvent } from '@bb/forge';
import type { InboxEvent } from '@bb/state';
import { carryOut } from './actions';
import { budgetGate } from './budget-watch';
import { type Core, threadDesk } from './core';
import { type Decision, decide, type Facts } from './decide';
import { gatherFacts } from './facts';
import { INITIAL, transition } from './machine';
import { parseIssueKey } from './routing';
import type { BottleSession } from './session';
import { handleThreadCommand, isThreadCommand } from './supervise-thread';
import { noteHidden } from './turn-log';

/** Handle one forge event; returns its inbox state after (done, or deferred when it waits). */
export async function handleEvent(
  core: Core,
  key: string,
  inbox: InboxEvent,
  event: ForgeEvent,
): Promise<'done' | 'deferred'> {
  const known = core.sessions.get(key);
  if (known) await noticeRemoved(core, known);
  // A supervise decision on the thread (`/bb approve …`) is the desk's: it never wakes the agent.
  const desk = threadDesk(core.o.supervise);
  if (desk && event.kind === 'comment_created' && isThreadCommand(event.comment.body)) {
    await handleThreadCommand(core, desk, key, event.comment, event.number);
    return 'done';
  }
  const policy = {
    botLogin: core.o.botLogin,
    ...(core.o.ignoreUsers?.length ? { ignoreUsers: core.o.ignoreUsers } : {}),
    ...(core.o.resumeOnHumanPush ? { resumeOnHumanPush: true } : {}),
  };
  const facts: Facts = {};
  let d: Decision;
  for (;;) {
    const view = {
      issue: parseIssueKey(key).issue,
      known: !!known,
      state: known?.state ?? INITIAL,
      heads: known?.heads,
    };
    d = decide(event, facts, view, policy);
    if (d.kind !== 'need') break;
    await gatherFacts(core, key, d.needs, facts);
  }
  for (const entry of d.logs ?? []) core.log({ ...entry, key });
  if (d.seen && known) known.heads = { ...known.heads, [d.seen.pr]: d.seen.sha };
  if (d.kind === 'done') {
    if (d.feedback) await core.feedback(key, d.feedback);
    return 'done';
  }
  // Budgets: a paused bottle waits to be told to go on; the org's spent day holds new turns.
  const gate = await budgetGate(core, key, known, d, event);
  if (gate !== 'go') return gate;
  const s = core.sessions.open(key);
  if (d.bottles) s.bottles = d.bottles;
  const next = transition(s.state, d.input, core.ctx);
  // Work that needs room to run waits for it, in order, without holding the issue.
  if (next.actions.some((a) => a.type === 'launch' || a.type === 'resume')) {
    const agent = d.agent ?? s.agent;
    const bytes = core.o.runner.memoryOf(agent, s.bottles);
    // A launch that will take a pooled bottle counts the room that bottle holds as its own.
    const mine = next.actions.some((a) => a.type === 'launch')
      ? core.o.runner.pool?.held().find((h) => h.agent === agent)?.slug
      : s.slug;
    // Warm bottles give way to work that needs their room (no await when none has to:
    // from the check to taking the room nothing else may run).
    const room = core.warm.makeRoom(bytes, mine);
    if (room) await room;
    if (!core.capacity.fits(bytes, mine)) {
      core.capacity.wait(key, bytes);
      core.log({ msg: 'waiting for capacity', key, usedBytes: core.capacity.used });
      return 'deferred';
    }
  }
  // What the prompt's text had that its readers could not see: noted for the turn that hears it.
  if (d.hidden && s.slug) await noteHidden(core.o.runner.storage, s.slug, d.hidden);
  const pendingBefore = s.state.pending.length;
  s.decided(next.state);
  const queued = s.state.pending.length > pendingBefore;
  if (queued) s.deferred.push(inbox.id);
  // Heard: the person sees it before the agent answers.
  if (d.ack && (queued || next.actions.some((a) => a.type === 'resume')))
    core.acknowledge(key, d.ack);
  await carryOut(core, s, next.actions, { agent: d.agent, issue: facts.issue });
  return queued ? 'deferred' : 'done';
}

/** Destroyed by hand (`bb destroy`, `bb gc`) while frozen: the row says so, and so does the session. */
async function noticeRemoved(core: Core, s: BottleSession): Promise<void> {
  if (s.state.status !== 'frozen') return;
  const row = await core.o.store.get(s.owner, s.repo, s.issue);
  if (row?.status === 'destroyed' && row.slug === s.slug)
    s.set({ ...s.state, status: 'destroyed', pending: [] });
}
