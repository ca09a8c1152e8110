import { errorMessage } from '@bb/errors';
import type { ForgeEvent } from '@bb/forge';
import { type InboxEvent, openEventsOfIssue } from '@bb/state';
import type { Core } from './core';
import type { AdoptReport } from './fleet';
import { gaveUpMessage } from './outcome';
import { issueKey, issueOf, parseIssueKey, prOf } from './routing';
import type { SerialQueue } from './serial-queue';
import type { BottleSession } from './session';
import { eventWork, type Work } from './work';

/**
 * Accept a forge event (from the webhook or the sweep): durably, under its
 * semantic key, with the issue it belongs to when that is known (an indexed
 * lookup). `false` for a change accepted before. Resolves once the event is
 * durable; its handling goes on after, on its issue's queue.
 */
export async function acceptEvent(core: Core, event: ForgeEvent): Promise<boolean> {
  // The issue from the event itself when it says (its number, a bottle branch);
  // a PR's owner is found by the store in the same write as the event.
  let pr: { owner: string; repo: string; pr: number } | undefined;
  const issue = await issueOf(
    event,
    (owner, repo, n) => {
      pr = { owner, repo, pr: n };
      return undefined;
    },
    core.o.forge.kind,
  );
  // Its notice (the inbox's watchPending) may come before the write's answer: this
  // process queues it itself.
  core.accepting.add(event.key);
  try {
    return await acceptAndQueue(core, event, issue, pr);
  } finally {
    core.accepting.delete(event.key);
  }
}

async function acceptAndQueue(
  core: Core,
  event: ForgeEvent,
  issue: number | undefined,
  pr: { owner: string; repo: string; pr: number } | undefined,
): Promise<boolean> {
  const stored = await core.o.inbox.accept(event.key, {
    issue: issue === undefined ? null : issueKey(event.owner, event.repo, issue),
    occurredAt: event.occurredAt,
    payload: event,
    deliveryId: event.deliveryId,
    kind: event.kind,
    ...(issue === undefined && pr
      ? {
          byPr: {
            ...pr,
            // A PR a person opened is never a bottle's; the bot's may be one a running
            // agent is opening now.
            unclaimed:
              'pr' in event && event.pr.author !== core.o.botLogin ? 'done' : 'parkIfRunning',
          },
        }
      : {}),
  });
  if (!stored) return false;
  if (stored.issue && stored.state !== 'done') {
    // Queued already when its notice (the inbox's watchPending) came first.
    if (!core.queued.has(stored.id))
      core.push(stored.issue, { type: 'event', inbox: stored, event, attempt: 0 });
  } else if (stored.state === 'done')
    core.log({ msg: 'event not about a bottle', key: event.key, kind: event.kind });
  else core.log({ msg: 'event parked until a bottle claims its PR', key: event.key });
  return true;
}

/**
 * Whether a bottle may still claim the PR of `event`: one runs in its
 * repository (its agent may be opening that PR now), and the PR, when the
 * event says who opened it, was opened by the bot.
 */
async function couldClaim(core: Core, event: ForgeEvent): Promise<boolean> {
  if ('pr' in event && event.pr.author !== core.o.botLogin) return false;
  // Any orchestrator's bottle: the store, not this process's memory, says which run.
  return (await core.o.store.all()).some(
    (r) => r.owner === event.owner && r.repo === event.repo && r.status === 'running',
  );
}

/** Parked events no bottle can claim any more (none runs in their repository) are done. */
export async function expireParked(core: Core): Promise<void> {
  for (const e of await core.o.inbox.openEvents()) {
    if (e.state !== 'parked') continue;
    const event = e.payload as ForgeEvent;
    if (await couldClaim(core, event)) continue;
    if (await core.fleet.routeIfClaimed(e)) continue;
    await core.o.inbox.settle(e.id, 'done');
    core.log({ msg: 'event not about a bottle', key: e.key, kind: event.kind });
  }
}

/** Events parked for a PR nobody had claimed: now routed to the bottle that did. */
export async function routeParked(core: Core, s: BottleSession, pr: number): Promise<void> {
  for (const e of await core.o.inbox.openEvents()) {
    if (e.state !== 'parked') continue;
    const event = e.payload as ForgeEvent;
    if (event.owner !== s.owner || event.repo !== s.repo || prOf(event) !== pr) continue;
    await core.o.inbox.settle(e.id, 'pending', s.key);
    core.push(s.key, {
      type: 'event',
      inbox: { ...e, issue: s.key, state: 'pending' },
      event,
      attempt: 0,
    });
  }
}

/** Put every event that waited for capacity back on its issue's queue. */
export async function retryWaiting(core: Core, keys?: Set<string>): Promise<void> {
  // The issues that waited for room (or, given, for the daily budget) are taken off the list.
  const waiting = new Set(keys ?? core.capacity.takeWaiting());
  keys?.clear();
  if (waiting.size === 0) return;
  for (const e of await core.o.inbox.openEvents()) {
    if (e.state !== 'deferred' || !e.issue || !waiting.has(e.issue)) continue;
    // Comments deferred behind a running turn are not capacity waits.
    if (core.sessions.get(e.issue)?.deferred.includes(e.id)) continue;
    core.push(e.issue, eventWork(e));
  }
}

/**
 * Queue here the open events of `key` that happened before `than` and are not
 * queued yet (accepted by another orchestrator since this one last read the
 * inbox). Whether there were any.
 */
export async function takeOlder(core: Core, key: string, than: InboxEvent): Promise<boolean> {
  let open: InboxEvent[];
  try {
    open = await openEventsOfIssue(core.o.inbox, key);
  } catch {
    return false; // the next poll brings them; this one is not held back
  }
  const older = open.filter(
    (e) =>
      e.state === 'pending' &&
      e.id !== than.id &&
      !core.queued.has(e.id) &&
      (e.occurredAt < than.occurredAt || (e.occurredAt === than.occurredAt && e.id < than.id)),
  );
  for (const e of older) core.push(key, eventWork(e));
  return older.length > 0;
}

/**
 * An event not handled (it stays open in the inbox): tried again after the
 * next wait, or given up after the last. Its issue's lease is kept meanwhile.
 */
export function retryEvent(
  core: Core,
  key: string,
  work: Extract<Work, { type: 'event' }>,
  err?: unknown,
): void {
  const wait = core.retryMs[work.attempt];
  core.log({
    msg: wait === undefined ? 'event failed; giving up' : 'event failed; will retry',
    key,
    event: work.inbox.key,
    kind: work.event.kind,
    ...(err === undefined ? {} : { error: errorMessage(err) }),
    ...(wait === undefined ? {} : { retryInMs: wait }),
  });
  if (wait === undefined) {
    core.queued.delete(work.inbox.id);
    void Promise.resolve()
      .then(() => core.o.inbox.settle(work.inbox.id, 'done'))
      .catch((e) => core.log({ msg: 'could not give an event up', key, error: errorMessage(e) }));
    // The person who asked is told, once: nothing will happen unless they ask again.
    void core
      .turnOutcome(
        key,
        parseIssueKey(key).issue,
        gaveUpMessage(work.event, core.retryMs.length + 1),
        `gave-up:${work.inbox.key}`,
      )
      .catch((e) =>
        core.log({ msg: 'could not tell the turn outcome', key, error: errorMessage(e) }),
      );
    return;
  }
  const retrying = core.fleet.retrying;
  retrying.set(key, (retrying.get(key) ?? 0) + 1);
  core.later(wait, () => {
    const left = (retrying.get(key) ?? 1) - 1;
    if (left > 0) retrying.set(key, left);
    else retrying.delete(key);
    core.push(key, { ...work, attempt: work.attempt + 1 });
  });
}

/**
 * Claim an issue this process does not hold, for `work` on its queue; whether
 * the work goes on here now (not when another holds it, when it was handled
 * meanwhile, or when older events came with the issue and go first).
 */
export async function adoptFor(
  core: Core,
  key: string,
  work: Work,
  queue: SerialQueue<Work>,
): Promise<boolean> {
  let adopted: AdoptReport | undefined;
  try {
    adopted = await core.fleet.adoptIssue(key);
  } catch (err) {
    // The store or the engine did not answer: the work is tried again later.
    core.log({ msg: 'could not take the issue', key, error: errorMessage(err) });
    if (work.type === 'event') retryEvent(core, key, work);
    return false;
  }
  if (!adopted) {
    if (work.type === 'event') core.queued.delete(work.inbox.id);
    return false;
  }
  if (work.type !== 'event') return true;
  // Handled meanwhile by whoever held the issue before: nothing left to do.
  if (!adopted.open.has(work.inbox.id)) {
    core.queued.delete(work.inbox.id);
    return false;
  }
  // Older events came with the issue: this one waits for its turn among them.
  if (adopted.replayed > 0) {
    queue.push(key, work);
    return false;
  }
  return true;
}
