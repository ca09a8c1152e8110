/**
 * What a running turn reports, on its issue's queue: a PR it opened, its done
 * signal, and its end, whose pipeline is here: evidence first (the turn's
 * record), then the frozen row, then what comes next (a rebuilt image's turn,
 * the comments that waited, the bottle's removal).
 */
import { errorMessage } from '@bb/errors';
import type { TurnOutcome } from '@bb/headless';
import { carryOut, resumeBottle } from './actions';
import { holdBack, idleCheck } from './budget-watch';
import { type Core, cancelSupervise } from './core';
import { routeParked } from './intake';
import { type LifecycleInput, transition } from './machine';
import { turnOutcomeMessage } from './outcome';
import { recordTurn } from './record-turn';
import type { BottleSession, Fired } from './session';
import { readTurnLog } from './turn-log';
import type { TurnReport } from './turn-monitor';
import { storeAway, untilStored } from './until-stored';

/** What a running turn reported: its PRs, its done signal, its end. */
export async function turnWork(core: Core, key: string, report: TurnReport): Promise<void> {
  const s = core.sessions.get(key);
  if (!s || s.slug !== report.slug) return;
  let input: LifecycleInput;
  if (report.kind === 'pr_learned') {
    input = { type: 'pr_opened', pr: report.pr, author: core.o.botLogin };
  } else if (report.kind === 'done_signalled') {
    input = { type: 'done_signalled' };
  } else if (report.kind === 'turn_ended') {
    return turnEnded(core, s, report.outcome);
  } else return;
  const next = transition(s.state, input, core.ctx);
  s.decided(next.state);
  await carryOut(core, s, next.actions);
  if (report.kind === 'pr_learned') {
    await s.save(['running', 'frozen']);
    await routeParked(core, s, report.pr);
  }
}

/** Why the turn that ended stopped, when it did not stop by itself. */
function whyStopped(
  s: BottleSession,
  fired: Fired | undefined,
  outcome: TurnOutcome,
  rebuilt: { requestId: string } | undefined,
): Fired | undefined {
  if (fired) return fired;
  // The operator approved a new image: this turn ends, the next starts in it at once.
  if (rebuilt && !s.state.closing)
    return {
      reason: 'stopped',
      detail: `the operator approved a rebuilt image (${rebuilt.requestId}); the agent continues in it`,
    };
  if (outcome.vanished)
    return {
      reason: 'vanished',
      ...(outcome.lostWith
        ? {
            detail: `its turn ran on engine ${outcome.lostWith}, whose orchestrator stopped: the turn was lost with it`,
            lostWith: outcome.lostWith,
          }
        : { detail: 'the agent container was gone when its turn was looked for' }),
    };
  if (s.state.closing)
    return { reason: 'closed', detail: 'its PR or issue was closed while the agent worked' };
  return undefined;
}

/** A turn ended: record it (evidence first), then decide what comes next. */
async function turnEnded(core: Core, s: BottleSession, outcome: TurnOutcome): Promise<void> {
  const { runner } = core.o;
  if (s.state.status !== 'running') {
    core.log({ msg: 'turn end for a bottle not running: ignored', key: s.key, slug: s.slug });
    // The monitor that reported it is done: a later turn is watched afresh.
    if (s.monitor?.ended) s.unwatch();
    // Nobody will resume it from here: it is not left paused.
    if (outcome.warm) await runner.cool?.(s.slug).catch(() => {});
    return;
  }
  // Recorded, frozen and followed up by the issue's holder only: one that stalled past
  // its lease leaves the turn to the orchestrator that took the issue (it watches it too).
  const waitOut = {
    log: (e: Record<string, unknown>) => core.log({ ...e, key: s.key }),
    closed: () => core.closed(),
  };
  if (!(await untilStored('the turn end', () => core.fleet.stillHolds(s.key), waitOut))) {
    core.log({ msg: 'turn end left to the holder of the issue', key: s.key, slug: s.slug });
    return;
  }
  // The monitor stays registered until the row says frozen: the watchdog must not
  // take the bottle for one whose wait was lost and watch (and record) it again.
  s.monitor?.close();
  s.checkinSavedAt = 0;
  core.capacity.release(s.slug);
  // Kept warm: what it holds counts until it is cooled, at the latest when its window ends.
  if (outcome.warm) core.warm.hold(s.slug, outcome.warm);
  const stopped = s.fired ?? (await readTurnLog(runner.storage, s.slug)).fired;
  s.fired = undefined;
  s.pause = undefined;
  // A request the turn left waiting has no one to answer: the next turn asks again if it must.
  await cancelSupervise(core, s.slug, 'the turn it was asked in ended before a decision');

  const rebuilt = runner.takeResumeRequest?.(s.slug);
  const fired = whyStopped(s, stopped, outcome, rebuilt);
  let done: Awaited<ReturnType<typeof recordTurn>>['done'] = null;
  // The store (or its disk) failed the record at some try: it is not given up on.
  let storeTrouble = false;
  let turn: number | undefined;
  try {
    // Evidence first: an outage of the database holds the record until it is back.
    const startedAt =
      (await runner.storage.meta(s.slug))?.turns.at(-1)?.startedAt ?? new Date().toISOString();
    const recorded = await untilStored(
      'the turn record',
      () =>
        recordTurn({
          slug: s.slug,
          agent: s.agent,
          env: core.o.env,
          storage: runner.storage,
          forge: { owner: s.owner, repo: s.repo, issue: s.issue },
          prs: s.state.prs,
          outcome,
          startedAt,
          fired,
          provenance: core.o.provenance,
          ...(core.o.supervise?.auditTurn
            ? { supervise: (slug: string, at: string) => core.o.supervise!.auditTurn!(slug, at) }
            : {}),
        }),
      {
        ...waitOut,
        onAway: () => {
          storeTrouble = true;
        },
      },
    );
    done = recorded.done;
    turn = recorded.record.turn;
    core.spend.recorded();
    core.turnLogs.forget(s.slug);
    for (const pr of recorded.prs)
      if (!s.state.prs.includes(pr)) {
        s.set({ ...s.state, prs: [...s.state.prs, pr] });
        await routeParked(core, s, pr);
      }
  } catch (err) {
    core.log({
      msg: 'could not record the turn',
      key: s.key,
      slug: s.slug,
      error: errorMessage(err),
    });
    // Evidence first: a turn its store could not take is not frozen unrecorded. Its end is
    // done again from the start (the watchdog finds its agent gone), when there is room.
    if (storeTrouble || storeAway(err)) throw err;
  }
  // The machine decides from the turn that ended; the row says frozen before anything it asks.
  const ended = s.state;
  try {
    await untilStored('the frozen row', () => s.commit({ ...ended, status: 'frozen' }), waitOut);
  } finally {
    s.monitor = undefined;
  }
  core.log({
    msg: 'turn ended',
    key: s.key,
    slug: s.slug,
    exitCode: outcome.exitCode,
    done: done?.status ?? null,
    ...(fired ? { fired: fired.reason } : {}),
  });
  // Turns in a row without a push: paused, and the thread asked (in place of what follows).
  const idle =
    ended.closing || rebuilt ? undefined : await idleCheck(core, s).catch(() => undefined);
  if (idle) {
    turn ??= (await runner.storage.meta(s.slug))?.turns.length ?? 1;
    await core
      .turnOutcome(s.key, ended.prs.at(-1) ?? s.issue, idle, `idle:${s.slug}:${turn}`)
      .catch((err) =>
        core.log({ msg: 'could not tell the turn outcome', key: s.key, error: errorMessage(err) }),
      );
  }
  // Ended without a word from the agent, and not by people closing its work: the thread is told.
  else if (!done && !ended.closing && fired?.reason !== 'closed' && !rebuilt) {
    turn ??= (await runner.storage.meta(s.slug))?.turns.length ?? 1;
    await core
      .turnOutcome(
        s.key,
        ended.prs.at(-1) ?? s.issue,
        turnOutcomeMessage(
          fired ?? { reason: 'exit_without_signal', detail: 'it exited without signal_done' },
          {
            exitCode: outcome.exitCode,
            mentionOnly: !!core.o.mentionOnly,
            botLogin: core.o.botLogin,
            agent: s.agent,
          },
        ),
        `turn:${s.slug}:${turn}`,
      )
      .catch((err) =>
        core.log({ msg: 'could not tell the turn outcome', key: s.key, error: errorMessage(err) }),
      );
  }
  if (rebuilt && !ended.closing) {
    core.log({
      msg: 'resuming in the rebuilt image',
      key: s.key,
      slug: s.slug,
      request: rebuilt.requestId,
    });
    // A turn stopped before its CLI named a session goes on in a fresh one, told its task.
    const session = (await runner.storage.meta(s.slug))?.sessionId;
    await resumeBottle(core, s, rebuilt.prompt, { fresh: !session });
    return;
  }
  const input: LifecycleInput =
    fired && fired.reason !== 'closed'
      ? { type: 'watchdog', reason: fired.reason }
      : done || ended.closing
        ? { type: 'agent_stopped' }
        : { type: 'watchdog', reason: 'exit_without_signal' };
  // Paused at a cap or by the loop breaker: the comments that came meanwhile do not wake it.
  const next = await holdBack(core, s, transition(ended, input, core.ctx));
  s.decided(next.state);
  await carryOut(core, s, next.actions);
  core.freed();
}
