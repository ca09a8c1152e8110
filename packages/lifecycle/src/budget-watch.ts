/**
 * Budgets at work: a running turn is held against its caps on each watchdog
 * pass and stopped at one; a bottle stopped so waits, frozen with its
 * session, until an allowed person says `/bb continue` (or replies, as the
 * policy says); new turns wait while the org's daily budget is spent; a
 * bottle that keeps taking turns without pushing is paused and the thread
 * asked.
 */
import { errorMessage } from '@bb/errors';
import type { ForgeEvent } from '@bb/forge';
import {
  type Budget,
  budgetFor,
  CONTINUE_HINT,
  capReached,
  clearHold,
  dayCapReached,
  type Grant,
  parseContinue,
  readAllowance,
  readHold,
  type TurnSpend,
  writeAllowance,
  writeHold,
} from './budget';
import type { Core } from './core';
import type { Decision } from './decide';
import type { LifecycleAction, LifecycleState } from './machine';
import type { BottleSession } from './session';

/** An agent's caps now: the policy's, its manifest's, and what `/bb continue` gave this turn. */
async function capsOf(core: Core, s: BottleSession): Promise<Budget> {
  const manifest = core.o.budgetOf?.(s.agent) ?? core.o.runner.budgetOf?.(s.agent);
  const allowance = s.slug ? await readAllowance(core.o.runner.storage, s.slug) : undefined;
  // A grant is for the turn it woke (while the turns ended are those it counted from), not for ever.
  const ended = (await core.o.runner.storage.meta(s.slug))?.turns.length ?? 0;
  const grant = allowance && ended <= (allowance.idleFrom ?? 0) ? allowance.grant : undefined;
  return budgetFor(core.o.budgets, manifest, grant);
}

/** Whether the org's day has a cap (only then is today's spend read). */
const dayCapped = (core: Core) =>
  core.o.budgets?.dayTokens !== undefined || core.o.budgets?.dayUsd !== undefined;

/** What the bottle's recorded turns spent, less what a `/bb continue` counts from. */
async function issueSpent(core: Core, s: BottleSession): Promise<{ tokens: number; usd: number }> {
  const turns = (await core.o.runner.storage.meta(s.slug))?.turns.length ?? 0;
  const all = await core.spend.bottle(s.slug, turns);
  const from = (await readAllowance(core.o.runner.storage, s.slug))?.from;
  return {
    tokens: Math.max(0, all.tokens - (from?.tokens ?? 0)),
    usd: Math.max(0, all.usd - (from?.usd ?? 0)),
  };
}

/** What each running turn has used so far (the watched sessions'), read once a pass. */
export async function runningSpend(
  core: Core,
  sessions: BottleSession[],
): Promise<Map<BottleSession, TurnSpend>> {
  const out = new Map<BottleSession, TurnSpend>();
  for (const s of sessions) {
    const m = s.monitor;
    if (!m || m.ended || !s.slug) continue;
    try {
      out.set(
        s,
        await core.turnLogs.spend(
          core.o.runner.storage,
          s.slug,
          new Date(m.startedAt).toISOString(),
          core.spend.prices,
        ),
      );
    } catch (err) {
      core.log({ msg: 'could not read what a turn used', slug: s.slug, error: errorMessage(err) });
    }
  }
  return out;
}

/**
 * Hold a running turn against its caps (`spent`: what every running turn used
 * so far, this one's among them); stop it at one (its turn then ends the
 * ordinary way, frozen, recorded with the reason) and keep the bottle from
 * waking until it is told to go on. Waiting for the operator does not count as
 * the turn's time.
 */
export async function checkBudget(
  core: Core,
  s: BottleSession,
  now: number,
  spent: Map<BottleSession, TurnSpend>,
): Promise<void> {
  const monitor = s.monitor;
  const turn = spent.get(s);
  if (!monitor || monitor.ended || s.fired || !s.slug || !turn) return;
  const caps = await capsOf(core, s);
  const today = dayCapped(core) ? await core.spend.today(now) : { tokens: 0, usd: 0 };
  let running = { tokens: 0, usd: 0 };
  for (const t of spent.values())
    running = { tokens: running.tokens + t.tokens, usd: running.usd + t.usd };
  const paused = s.pause ? s.pause.last - s.pause.since : 0;
  const fired = capReached(caps, core.o.budgets, {
    turn,
    issue: await issueSpent(core, s),
    day: { tokens: today.tokens + running.tokens, usd: today.usd + running.usd },
    minutes: (now - monitor.startedAt - paused) / 60_000,
  });
  // Only the turn that was measured is stopped (it may have ended while this looked).
  if (!fired || s.monitor !== monitor || monitor.ended || s.fired) return;
  await writeHold(core.o.runner.storage, s.slug, {
    what: fired.detail,
    at: new Date(now).toISOString(),
  });
  await core.fire(s, fired);
}

/** What a paused bottle's thread is told when someone replies to it. */
const pausedMessage = (what: string) =>
  `This agent is paused: ${what}. Its work so far is kept. ${CONTINUE_HINT}`;

/**
 * A turn's end that would resume the bottle at once for the comments that came
 * in meanwhile: when the turn left it paused (at a cap, or by the loop breaker),
 * it stays frozen, those comments are taken as heard, and the thread is told how
 * to go on.
 */
export async function holdBack<T extends { state: LifecycleState; actions: LifecycleAction[] }>(
  core: Core,
  s: BottleSession,
  next: T,
): Promise<T> {
  if (!next.actions.some((a) => a.type === 'resume')) return next;
  const hold = await readHold(core.o.runner.storage, s.slug);
  if (!hold) return next;
  // Any reply goes on, as the policy says: the comments that waited are that reply.
  if ((core.o.budgets?.resume ?? 'command') !== 'command') {
    await allow(core, s, {});
    return next;
  }
  for (const id of s.deferred.splice(0)) await core.o.inbox.settle(id, 'done');
  await core.feedback(s.key, pausedMessage(hold.what), `hold:${s.slug}:${hold.at}`);
  core.log({ msg: 'paused: the comments that waited do not wake it', key: s.key, slug: s.slug });
  return {
    ...next,
    state: { ...next.state, status: 'frozen', pending: [] },
    actions: next.actions.filter((a) => a.type !== 'resume'),
  };
}

/** The text of a comment or review that would wake the agent. */
const bodyOf = (event: ForgeEvent): string | undefined =>
  event.kind === 'comment_created'
    ? event.comment.body
    : event.kind === 'review_submitted'
      ? event.body
      : undefined;

/**
 * Before a decided wake or launch is carried out: whether the budgets let it
 * happen. `go` carries on; `done` answered it on the thread and does nothing
 * more; `deferred` waits for the org's daily budget.
 */
export async function budgetGate(
  core: Core,
  key: string,
  s: BottleSession | undefined,
  d: Extract<Decision, { kind: 'input' }>,
  event: ForgeEvent,
): Promise<'go' | 'done' | 'deferred'> {
  const wakes = d.input.type === 'message' || d.input.type === 'pr_synchronized';
  const launches = d.input.type === 'targeted' && !s?.slug;
  if ((!wakes || s?.state.status !== 'frozen') && !launches) return 'go';
  const storage = core.o.runner.storage;
  // A comment to a running turn waits behind it; only a frozen bottle is woken here.
  if (wakes && s?.slug && s.state.status === 'frozen') {
    const body = bodyOf(event);
    const said = body === undefined ? undefined : parseContinue(body);
    if (said && 'error' in said) {
      await core.feedback(
        key,
        `bot-bottle could not read that: ${said.error}.`,
        `continue-error:${event.kind === 'comment_created' ? event.comment.id : event.kind}:${s.slug}`,
      );
      return 'done';
    }
    const hold = await readHold(storage, s.slug);
    if (hold && !said && (core.o.budgets?.resume ?? 'command') === 'command') {
      await core.feedback(key, pausedMessage(hold.what), `hold:${s.slug}:${hold.at}`);
      return 'done';
    }
    if (hold || said) await allow(core, s, said?.grant ?? {});
    else if (await overIssueCap(core, s)) return 'done';
  }
  const day = dayCapped(core) ? dayCapReached(core.o.budgets, await core.spend.today()) : undefined;
  if (day) {
    core.budgetWaiting.add(key);
    core.log({ msg: 'waiting for the daily budget', key, why: day });
    await core.feedback(
      key,
      `This waits: ${day}. It starts when the budget renews at 00:00 UTC, or when the operator raises it.`,
      `day:${new Date().toISOString().slice(0, 10)}:${key}`,
    );
    return 'deferred';
  }
  return 'go';
}

/** A bottle told to go on: its hold is lifted and the issue's spend is counted afresh. */
async function allow(core: Core, s: BottleSession, grant: Grant): Promise<void> {
  const storage = core.o.runner.storage;
  const turns = (await storage.meta(s.slug))?.turns.length ?? 0;
  const all = await core.spend.bottle(s.slug, turns);
  await writeAllowance(storage, s.slug, {
    from: { tokens: all.tokens, usd: all.usd },
    ...(Object.keys(grant).length ? { grant } : {}),
    idleFrom: turns,
  });
  await clearHold(storage, s.slug);
  core.log({ msg: 'budget: told to go on', key: s.key, slug: s.slug, grant });
}

/** A bottle whose issue already spent its cap is paused before a turn starts (and the thread told). */
async function overIssueCap(core: Core, s: BottleSession): Promise<boolean> {
  const caps = await capsOf(core, s);
  // No cap for the issue: its records are not read (a resume is not held up for nothing).
  if (caps.issueTokens === undefined && caps.issueUsd === undefined) return false;
  const spent = await issueSpent(core, s);
  const fired = capReached({ issueTokens: caps.issueTokens, issueUsd: caps.issueUsd }, undefined, {
    turn: { tokens: 0, usd: 0, comments: 0 },
    issue: spent,
    day: { tokens: 0, usd: 0 },
    minutes: 0,
  });
  if (!fired) return false;
  const at = new Date().toISOString();
  await writeHold(core.o.runner.storage, s.slug, { what: fired.detail, at });
  await core.feedback(
    s.key,
    `This agent is paused: ${fired.detail}. Its work so far is kept. Reply /bb continue to have it go on.`,
    `hold:${s.slug}:${at}`,
  );
  return true;
}

/**
 * After a turn is recorded: a bottle whose last turns (since it was last told
 * to go on) pushed nothing is paused, in case it goes round in circles. What
 * the thread is told, or undefined when it goes on.
 */
export async function idleCheck(core: Core, s: BottleSession): Promise<string | undefined> {
  const max = core.o.budgets?.maxIdleTurns ?? 8;
  const storage = core.o.runner.storage;
  const from = (await readAllowance(storage, s.slug))?.idleFrom ?? 0;
  const chain = await core.o.provenance.store.chain(s.slug);
  let idle = 0;
  for (const { record: r } of [...chain].reverse()) {
    if (r.turn <= from) break;
    const pushed = r.opLog.entries.some(
      (e) => e['method'] === 'push' && e['outcome'] === 'ok' && String(e['time']) >= r.startedAt,
    );
    if (pushed) break;
    idle++;
  }
  if (idle < max) return undefined;
  const what = `it took ${idle} turns in a row without pushing anything`;
  await writeHold(storage, s.slug, { what, at: new Date().toISOString() });
  core.log({ msg: 'loop breaker: paused', key: s.key, slug: s.slug, idle });
  return `bot-bottle paused the agent: ${what}, so it may be going round in circles. Its work so far is kept. Reply /bb continue to have it go on.`;
}
