import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { errorMessage, isBbError } from '@bb/errors';
import { AGENT_LABEL_PREFIX } from '@bb/forge';
import { FORGE_PROMPT_OVERLAY } from '@bb/forge-sidecar';
import { supervises } from '@bb/headless';
import { SUPERVISE_PROMPT_OVERLAY } from '@bb/supervise';
import { issueText, mayDrive, rotationPrompt } from './conversation';
import { type Core, cancelSupervise } from './core';
import { INITIAL, type LifecycleAction } from './machine';
import type { BottleSession } from './session';
import { noteHidden, takeHidden, updateTurnLog } from './turn-log';
import { Seen } from './visible';
import { eventWork } from './work';

/**
 * What a new session is told first: how to reach the forge and, where bottles
 * have the supervise sidecar, how to ask for what the environment refuses.
 */
export const promptOverlay = (
  env: Record<string, string | undefined>,
  runner?: { supervise?: boolean | undefined },
): string =>
  supervises(env) && runner?.supervise !== false
    ? `${FORGE_PROMPT_OVERLAY}${SUPERVISE_PROMPT_OVERLAY}`
    : FORGE_PROMPT_OVERLAY;

/** The issue's title and body, when the event that launches it already read them. */
export type IssueText = { title: string; body: string };

/** Carry out what the machine decided for `s`, in order. */
export async function carryOut(
  core: Core,
  s: BottleSession,
  actions: LifecycleAction[],
  launch?: { agent?: string | undefined; issue?: IssueText | undefined },
): Promise<void> {
  for (const action of actions) {
    switch (action.type) {
      case 'log':
        core.log({ msg: action.message, key: s.key });
        break;
      case 'launch':
        await launchBottle(core, s, launch?.agent ?? s.agent, launch?.issue);
        break;
      case 'resume':
        await resumeBottle(core, s, action.prompt);
        break;
      case 'stop':
        if (action.reason === 'closed')
          await core.fire(s, {
            reason: 'closed',
            detail: action.why ?? 'its PR was closed while the agent worked',
          });
        else if (action.reason === 'untargeted')
          await core.fire(s, {
            reason: 'stopped',
            detail: action.why ?? 'the issue was taken back from the bot',
          });
        else s.monitor?.stopAfter(action.graceMs);
        break;
      case 'freeze':
        // A turn's end writes the frozen row before anything else is decided (`turn-end.ts`).
        if (s.state.status !== 'frozen') await s.commit({ ...s.state, status: 'frozen' });
        break;
      case 'destroy':
        await cancelSupervise(core, s.slug, 'the bottle was destroyed');
        core.warm.forget(s.slug);
        await core.warm.cooling(s.slug);
        // Never another orchestrator's bottle: one that stalled past its lease removes nothing.
        await core.fleet.fence(s.key);
        await core.o.runner.destroy(s.slug);
        await s.commit({ ...s.state, status: 'destroyed', pending: [] });
        core.log({ msg: 'bottle destroyed', key: s.key, slug: s.slug });
        break;
    }
  }
}

async function launchBottle(
  core: Core,
  s: BottleSession,
  agent: string,
  known: IssueText | undefined,
): Promise<void> {
  const { owner, repo, issue } = s;
  const { runner } = core.o;
  s.agent = agent;
  // A bottle of the warm pool when one is ready (made ahead, bound to this issue now).
  const pooled = runner.pool?.take(agent, s.bottles);
  s.slug = pooled ?? `${agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
  core.capacity.tryRun(s.slug, runner.memoryOf(agent, s.bottles));
  const forge = core.forgeFor(owner, repo);
  const mark = core.fleet.launchMark(s.slug);
  const seen = new Seen();
  try {
    // The event that targeted the issue read it a moment ago: it is not read again.
    const read = known ?? (await forge.readIssue(issue));
    const prompt = `${promptOverlay(core.o.env ?? process.env, core.o.runner)}\n${issueText(seen, issue, { owner, repo }, read)}`;
    // The row first: a crash from here on leaves something reconcile can see. Before
    // the row, a mark in this BB_HOME: whoever takes the issue over knows the bottle
    // was launched here even if the crash came before its directory was made.
    s.starting = true;
    mkdirSync(dirname(mark), { recursive: true, mode: 0o700 });
    writeFileSync(mark, `${s.key}\n`);
    await s.commit({ ...s.state, status: 'running' });
    await core.capacity.starting(() =>
      runner.startLaunch({
        agent,
        slug: s.slug,
        prompt,
        bottles: s.bottles,
        forge: {
          kind: core.o.forge.kind.name,
          site: core.o.forge.site.env(),
          ...(core.o.token ? { token: core.o.token } : {}),
          owner,
          repo,
          issue,
          cloneUrl: core.o.forge.site.cloneUrl({ owner, repo }),
        },
        // The forge's API says where the default branch is: a mirror already there
        // needs no fetch.
        defaultHead: () => forge.defaultBranchHead(),
        // No agent starts once the issue is another orchestrator's (a stall past the lease).
        fence: () => core.fleet.fence(s.key),
        // Its gate writes only while this process's hold on the issue is renewed.
        holdUntil: () => core.fleet.holdUntil(s.key),
      }),
    );
  } catch (err) {
    // Nothing ran: nothing to keep. The issue is launchable again; the event retries.
    core.capacity.release(s.slug);
    // A pooled bottle taken and never bound goes: it is handed out once, to nobody else.
    if (pooled)
      await runner.pool?.discard(pooled).catch((e) =>
        core.log({
          msg: 'could not remove a pooled bottle',
          slug: pooled,
          error: errorMessage(e),
        }),
      );
    core.freed();
    s.set(INITIAL);
    // Its own row only, while the issue is still this process's.
    if (
      (await core.o.store.get(owner, repo, issue))?.slug === s.slug &&
      (await core.fleet.stillHolds(s.key))
    )
      await core.o.store.delete(owner, repo, issue);
    core.log({ msg: 'launch failed', key: s.key, slug: s.slug, error: errorMessage(err) });
    if (isBbError(err, 'INVALID_INPUT') || isBbError(err, 'NOT_FOUND')) {
      // Nothing a retry fixes (an unknown agent or bottle): the person who asked is told.
      await core.feedback(
        s.key,
        // In fixed words: the error names the orchestrator's paths and engine (the log has it).
        `bot-bottle could not start agent ${agent}${s.bottles ? ` in bottle ${s.bottles.join(', ')}` : ''}: ${
          isBbError(err, 'NOT_FOUND')
            ? `there is no agent or bottle of that name here; check the ${AGENT_LABEL_PREFIX}<agent> label`
            : "its configuration on the orchestrator is not valid; the operator's log says why"
        }.`,
      );
      return;
    }
    throw err;
  } finally {
    s.starting = false;
    rmSync(mark, { force: true });
  }
  // The turn's record says what was taken out of the issue's text.
  await takeHidden(runner.storage, s.slug, seen.hidden).catch((err) =>
    core.log({ msg: 'could not note hidden text', key: s.key, error: errorMessage(err) }),
  );
  core.log({ msg: 'bottle launched', key: s.key, slug: s.slug, agent });
  core.watch(s.slug);
}

/** A frozen bottle's next turn, with `prompt`; its status is running from here. */
export async function resumeBottle(
  core: Core,
  s: BottleSession,
  prompt: string,
  o: { fresh?: boolean } = {},
): Promise<void> {
  const { runner } = core.o;
  // Its warm containers are this turn's now, unless they are being cooled (then it waits).
  core.warm.forget(s.slug);
  const cooling = core.warm.cooling(s.slug);
  if (cooling) await cooling;
  core.capacity.tryRun(s.slug, runner.memoryOf(s.agent));
  // Until its turn has started, the watchdog must not take the row for a turn it lost.
  s.starting = true;
  const pr = s.state.prs.at(-1);
  try {
    await s.commit({ ...s.state, status: 'running' });
    const fresh = o.fresh ? undefined : await rotation(core, s, prompt);
    // What was taken out of the text this turn's prompt quotes goes into its record.
    await takeHidden(runner.storage, s.slug);
    await core.capacity.starting(() =>
      runner.startResume({
        slug: s.slug,
        prompt: fresh ?? prompt,
        pr,
        ...(fresh || o.fresh ? { freshSession: true } : {}),
        // The PR's head as the forge's API says: no git process, no request of its git server.
        ...(pr !== undefined
          ? { prHead: async () => (await core.forgeFor(s.owner, s.repo).readPr(pr)).head.sha }
          : {}),
        fence: () => core.fleet.fence(s.key),
        // Its gate writes only while this process's hold on the issue is renewed.
        holdUntil: () => core.fleet.holdUntil(s.key),
      }),
    );
  } catch (err) {
    // The bottle is frozen again, workspace and session intact; the comments wait
    // (they are still open in the inbox) and are tried again.
    core.capacity.release(s.slug);
    core.freed();
    s.starting = false;
    await s.commit({ ...s.state, status: 'frozen', pending: [] }).catch((e) =>
      core.log({
        msg: 'could not write the row',
        key: s.key,
        slug: s.slug,
        error: errorMessage(e),
      }),
    );
    core.log({ msg: 'resume failed', key: s.key, slug: s.slug, error: errorMessage(err) });
    const waiting = new Set(s.deferred.splice(0));
    if (waiting.size > 0)
      core.later(core.retryMs[0] ?? 2000, async () => {
        for (const e of await core.o.inbox.openEvents())
          if (waiting.has(e.id)) core.push(s.key, eventWork(e, 1));
      });
    throw err;
  }
  // The comments that waited for this turn are delivered.
  for (const id of s.deferred.splice(0)) await core.o.inbox.settle(id, 'done');
  core.log({ msg: 'bottle resumed', key: s.key, slug: s.slug });
  core.watch(s.slug);
  s.starting = false;
}

/**
 * A fresh session in place of one that ran its agent's turn limit: the
 * prompt carries a summary of the work so far, and the turn's record says so.
 */
async function rotation(core: Core, s: BottleSession, prompt: string): Promise<string | undefined> {
  const { runner } = core.o;
  const limits = core.o.sessionLimits?.(s.agent) ?? runner.sessionLimits?.(s.agent) ?? {};
  const meta = await runner.storage.meta(s.slug);
  // Turns ran and no conversation was ever recorded: the turn that began it was lost
  // (its machine went, and the agent's output with it). It goes on in a fresh one.
  const lost = !!meta && !meta.sessionId && meta.turns.length > 0;
  if (!meta || (!lost && !limits.maxTurns && !limits.maxTokens)) return undefined;
  const inSession = meta.turns.length - (meta.sessionStart ?? 1) + 1;
  const read = meta.turns.at(-1)?.tokens;
  const reason = lost
    ? 'its conversation was lost with the turn that began it'
    : limits.maxTurns && inSession >= limits.maxTurns
      ? `the session ran ${inSession} turns (limit ${limits.maxTurns})`
      : limits.maxTokens && read !== undefined && read >= limits.maxTokens
        ? `its last turn read ${read} input tokens (limit ${limits.maxTokens})`
        : undefined;
  if (!reason) return undefined;
  const summaries = (await core.o.provenance.store.chain(s.slug))
    .slice(-inSession)
    .map((r) => r.record.done?.summary ?? `(turn ${r.record.turn} ended without a summary)`);
  const forge = core.forgeFor(s.owner, s.repo);
  const policy = { org: core.o.org ?? 'bot-bottle', botLogin: core.o.botLogin };
  const rotated = await rotationPrompt(forge, {
    mayQuote: async (author) => (await mayDrive(forge, policy, author, undefined)).ok,
    overlay: promptOverlay(core.o.env ?? process.env, core.o.runner),
    issue: s.issue,
    pr: s.state.prs.at(-1),
    previousTurns: inSession,
    summaries,
    now: prompt,
  });
  await updateTurnLog(runner.storage, s.slug, (log) => ({
    ...log,
    rotated: { reason, previousTurns: inSession, summary: rotated.summary },
  }));
  await noteHidden(runner.storage, s.slug, rotated.hidden);
  core.log({ msg: 'session rotated', key: s.key, slug: s.slug, previousTurns: inSession });
  return rotated.prompt;
}
