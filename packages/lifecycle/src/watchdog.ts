/**
 * The watchdog: an agent silent past its limit is stopped (its turn then ends
 * the ordinary way, and its record says why); waiting for the operator pauses
 * the clock, up to a limit per turn. Check-ins land in the bottle's row; a row
 * that says running with no turn watched is watched again.
 */
import { errorMessage } from '@bb/errors';
import { dayCapReached } from './budget';
import { checkBudget, runningSpend } from './budget-watch';
import type { Core } from './core';
import { expireParked, retryWaiting } from './intake';
import type { BottleSession, Fired } from './session';
import { updateTurnLog } from './turn-log';
import type { TurnReport } from './turn-monitor';
import { keyOf } from './work';

/** Stop an agent for `fired`; its turn ends through its monitor and is recorded with the reason. */
export async function fire(core: Core, s: BottleSession, fired: Fired): Promise<void> {
  if (s.fired) return;
  s.fired = fired;
  const storage = core.o.runner.storage;
  try {
    await updateTurnLog(storage, s.slug, (log) => ({ ...log, fired }));
  } catch {
    // the bottle's directory is gone: the record says vanished
  }
  core.log({ msg: 'watchdog fired', slug: s.slug, ...fired });
  await core.o.runner
    .stopAgent(s.slug, 2000)
    .catch((err) =>
      core.log({ msg: 'could not stop the agent', slug: s.slug, error: errorMessage(err) }),
    );
}

/** What a turn's monitor reported: a lost sidecar stops it, a check-in is written, the rest is queued. */
export function onReport(core: Core, report: TurnReport): void {
  const s = core.sessions.bySlug(report.slug);
  if (!s) return;
  if (report.kind !== 'checked_in')
    core.log({ msg: 'turn report', slug: report.slug, report: report.kind });
  if (report.kind === 'gate_lost') {
    void fire(core, s, { reason: 'sidecar_death', detail: report.detail });
    return;
  }
  if (report.kind === 'checked_in') {
    // The row says when the sidecar last checked in (at most every 30 s: a write, not a decision).
    if (Date.now() - s.checkinSavedAt >= 30_000 && s.state.status === 'running') {
      s.checkinSavedAt = Date.now();
      s.save(['running']).catch((err) =>
        core.log({ msg: 'could not save a check-in', slug: report.slug, error: errorMessage(err) }),
      );
    }
    return;
  }
  core.push(s.key, { type: 'turn', report, occurredAt: '' });
}

/**
 * One watchdog pass: a running agent that has not checked in for the
 * timeout is stopped; its turn then ends the ordinary way (frozen, with
 * provenance), and the record says why. A row that says running with no
 * turn watched (a wait lost) is watched again.
 */
export async function checkWatchdog(core: Core, now: number): Promise<void> {
  // Bottles whose holder is gone (or, after a restart, that nobody holds yet) first.
  await core.fleet.takeOver();
  const timeout = core.o.watchdogTimeoutMs ?? 30 * 60_000;
  const watched = [...core.sessions.watched()];
  // What every running turn used so far: each is held against its caps and the org's day.
  const spent = await runningSpend(core, watched);
  for (const s of watched) {
    if (s.monitor?.ended || s.fired) continue;
    // Steady output is not progress, and waiting for the operator is no licence to spend:
    // the caps stop a turn that talks and spends for ever.
    await checkBudget(core, s, now, spent).catch((err) =>
      core.log({ msg: 'could not check the budget', slug: s.slug, error: errorMessage(err) }),
    );
    if (s.fired) continue;
    // Waiting for the operator is not silence: the clock starts again once decided.
    // At most `superviseMaxPauseMs` in a turn: chained requests do not keep an agent alive for ever.
    // A supervise store that does not answer now is not a pause (nor a stop to this pass).
    const awaiting = await Promise.resolve(core.o.supervise?.awaitingOperator(s.slug)).catch(
      (err) => {
        core.log({
          msg: 'could not ask the supervise desk',
          slug: s.slug,
          error: errorMessage(err),
        });
        return false;
      },
    );
    if (awaiting) {
      const since = s.pause?.since ?? now;
      s.pause = { since, last: s.pause?.last ?? 0 };
      if (now - since <= (core.o.superviseMaxPauseMs ?? 24 * 3600_000)) {
        s.pause.last = now;
        continue;
      }
    }
    // A storage that does not answer is not a check-in: the last one read stands.
    const checkin = s.monitor ? await s.monitor.lastCheckin() : now;
    const silent = now - Math.max(checkin, s.pause?.last ?? 0);
    if (silent > timeout)
      await fire(core, s, {
        reason: 'silence',
        detail: `no check-in for ${Math.round(silent / 1000)} s (limit ${Math.round(timeout / 1000)} s)`,
      });
  }
  // Turns that waited for the org's daily budget go on once it is no longer spent.
  if (core.budgetWaiting.size > 0 && !dayCapReached(core.o.budgets, await core.spend.today(now)))
    await retryWaiting(core, core.budgetWaiting);
  // Work that waited long for room to run: the person who asked is told, once.
  const patience = core.o.capacityNoticeMs ?? 10 * 60_000;
  for (const w of core.capacity.waiting())
    if (now - Date.parse(w.since) > patience)
      await core.feedback(
        w.issue,
        `bot-bottle has had no room to run this agent for ${Math.round((now - Date.parse(w.since)) / 60_000)} min (its bottles use all of the memory budget); it starts as soon as one ends.`,
        `capacity:${w.since}`,
      );
  const counted = new Set(core.capacity.warm().map((w) => w.slug));
  const { runner } = core.o;
  for (const row of await core.o.store.all()) {
    // Issues being taken over are the fleet's to look at.
    if (!core.fleet.leases.holds(keyOf(row)) || core.fleet.taking(keyOf(row))) continue;
    if (row.status === 'running' && !core.sessions.busy(row.slug))
      core.watch(row.slug, Date.parse(row.lastCheckinAt) || now);
    // A warm bottle nobody counts (its turn's end was never taken in) is not left
    // paused past its window.
    if (row.status === 'frozen' && runner.cool && !counted.has(row.slug)) {
      const warm = (await runner.storage.meta(row.slug))?.warm;
      if (warm && Date.parse(warm.until) <= now && !core.warm.cooling(row.slug))
        await runner.cool(row.slug).catch((err) =>
          core.log({
            msg: 'could not cool a warm bottle',
            slug: row.slug,
            error: errorMessage(err),
          }),
        );
    }
  }
  await expireParked(core);
}

/**
 * Run `fn` every `ms` (unref'd), never two at once: a pass still running when
 * the next is due is not doubled. Failures go to `failed`.
 */
export function everyInterval(
  ms: number,
  fn: () => Promise<void>,
  failed: (err: unknown) => void,
): NodeJS.Timeout {
  let busy = false;
  const t = setInterval(() => {
    if (busy) return;
    busy = true;
    fn()
      .catch(failed)
      .finally(() => {
        busy = false;
      });
  }, ms);
  t.unref();
  return t;
}
