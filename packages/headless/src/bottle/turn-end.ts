/**
 * A bottle's turn as it ends: waiting for the agent (or the waiter's word), the
 * turn written down, the bottle frozen or kept warm; a turn whose containers are
 * gone, or that ran on another engine, recorded as lost; the agent stopped on demand.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, redactString } from '@bb/errors';
import { homeLayout, LABEL } from '@bb/names';
import { providerFor, validSessionId } from '../providers';
import {
  announcedCli,
  type BottleOptions,
  endedTurn,
  freeze,
  gateHealth,
  releaseHere,
  type TurnOutcome,
} from './bottle-parts';
import { GATE_ROLE } from './gate';
import { type BottleMeta, type BottlePaths, bottlePaths, readMeta, writeMeta } from './layout';
import { loadAgentManifest, loadBottleManifest } from './manifests';
import { needsProxies } from './plan';
import { supervises } from './plan-host';
import {
  type BottleConfig,
  effectiveConfig,
  grantDrift,
  writeCurrentConfig,
} from './supervise-gate';
import { awaitTurnEnd, canKeepWarm, IDLE_PROCESSES } from './warm';

/**
 * At a turn's end: whether a grant scoped to it is in force (the bottle's gate and
 * `current-config` differ from its manifests plus overrides), and if so put
 * `current-config` back. Manifests that cannot be read count as a drift.
 */
function turnGrantEnded(meta: BottleMeta, env: Record<string, string | undefined>): boolean {
  let cfg: BottleConfig;
  try {
    cfg = effectiveConfig(
      meta,
      meta.bottles.map((b) => loadBottleManifest(b, env).manifest),
      env,
    );
  } catch {
    return true;
  }
  if (!grantDrift(meta.slug, cfg, needsProxies(cfg) || supervises(env), env)) return false;
  writeCurrentConfig(meta.slug, cfg, env);
  return true;
}

/** Wait for a started agent to exit, record the turn, freeze the bottle. */
async function completeTurn(
  meta: BottleMeta,
  agentId: string,
  options: BottleOptions,
  env: Record<string, string | undefined>,
): Promise<TurnOutcome> {
  const { backend } = options;
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const provider = providerFor(agent.provider);
  // finishTurn asks this only of a turn in progress.
  const current = meta.current!;
  const p = bottlePaths(meta.slug, env);
  // Under the waiter, the turn ends when it says so or when the container goes.
  const end = current.waiter
    ? await awaitTurnEnd(backend, agentId, p, current.turn, current.nonce ?? '')
    : { ...(await backend.wait(agentId)), exited: true };
  const { exitCode, oomKilled } = end;
  // The turn was long: what others changed meanwhile (a rebuild's new image) stays.
  const latest = readMeta(meta.slug, env);
  // Ended meanwhile by another host (this one stalled; the one that took the issue over
  // recorded the turn lost, and may run the bottle now): nothing here is written.
  if (latest?.current?.startedAt !== current.startedAt || latest.holdId !== meta.holdId)
    throw new BbError(
      'CONFLICT',
      `turn ${current.turn} of ${meta.slug} was ended by another host while this one waited for it: its bottle is theirs now`,
      { data: { endedElsewhere: true } },
    );
  if (latest) {
    meta.image = latest.image;
    // And the session a rebuild's approval wrote down while the turn ran.
    meta.sessionId ??= latest.sessionId;
  }
  const output = redactString(
    await backend.logs(
      agentId,
      // A warm container's output holds its earlier turns too: this turn's only.
      current.waiter ? { sinceMs: Date.parse(current.startedAt) } : {},
    ),
  );
  const parsed = provider.parseResult(output, exitCode);
  const cli = announcedCli(output);
  meta.sessionId = validSessionId(parsed.sessionId) ?? meta.sessionId;
  options.onProgress?.(
    `agent exited ${exitCode}${oomKilled ? ' (out of memory)' : ''}; freezing ${meta.slug}`,
  );
  // Kept warm only when the waiter's turn ended by itself (not killed: out of memory
  // is told only by the container's end) and nothing of it is left running. Until the
  // turn is written down as ended, a restart finishes it again (its end is still said).
  // A grant scoped to this turn ends with it (I9): a bottle whose gate serves one is not
  // kept warm, and what it shows the agent and the operator is its own configuration again.
  const drift = turnGrantEnded(meta, env);
  const warm =
    !drift && !end.exited && exitCode < 128 && (options.warmMs ?? 0) > 0
      ? await keepWarm(meta, p, agentId, current.turn, options).catch(() => undefined)
      : undefined;
  meta.turns.push(endedTurn(current, exitCode, parsed));
  meta.current = null;
  if (warm) {
    if (existsSync(p.logs))
      writeFileSync(join(p.logs, `agent-turn${current.turn}-${Date.now()}.log`), output);
    meta.status = 'frozen';
    meta.warm = warm;
    writeMeta(meta, env);
  } else {
    writeMeta(meta, env);
    await freeze(meta.slug, options);
  }
  return {
    slug: meta.slug,
    exitCode,
    ok: parsed.ok && !oomKilled,
    sessionId: meta.sessionId ?? undefined,
    ...(parsed.error || oomKilled
      ? { error: oomKilled ? 'the agent ran out of memory' : parsed.error }
      : {}),
    output,
    ...(parsed.tokens !== undefined ? { tokens: parsed.tokens } : {}),
    provider: agent.provider,
    ...(cli && cli.name === agent.provider ? { providerVersion: cli.version } : {}),
    ...(warm ? { warm: { until: warm.until, bytes: warm.bytes } } : {}),
  };
}

/**
 * Keep a bottle warm after turn `turn`: its agent container paused, checked
 * from outside to hold nothing but its init and the waiter, then its gate
 * paused. Undefined (the caller freezes it the ordinary way) when anything of
 * the turn is left running or the key of its containers is unknown.
 */
async function keepWarm(
  meta: BottleMeta,
  p: BottlePaths,
  agentId: string,
  turn: number,
  options: BottleOptions,
): Promise<NonNullable<BottleMeta['warm']> | undefined> {
  const { backend } = options;
  if (!meta.warmKey || !canKeepWarm(backend)) return undefined;
  // Paused first: whatever is in it stops where it is, then it is counted. What the
  // turn started may still be exiting (its waiter kills them all): it is given a moment
  // (a loaded host is slow to reap), and only what stays is a reason to freeze instead.
  for (let look = 0; ; look++) {
    await backend.freeze(agentId);
    if ((await backend.processes!(agentId)) <= IDLE_PROCESSES) break;
    if (look === 4) return undefined;
    await backend.rehydrate(agentId);
    await new Promise((r) => setTimeout(r, 250));
  }
  const gate = (await backend.list({ [LABEL.slug]: meta.slug })).find(
    (c) => c.labels[LABEL.role] === GATE_ROLE && c.state === 'running',
  );
  // What its gate may write to, asked before it is paused: the next turn's PR must be in it.
  const scope = meta.forge ? (await gateHealth(p).catch(() => undefined))?.scope : undefined;
  if (meta.forge && !scope) return undefined;
  if (gate) await backend.freeze(gate.id);
  const held = await Promise.all(
    [agentId, ...(gate ? [gate.id] : [])].map((id) =>
      backend.memoryUsage ? backend.memoryUsage(id).catch(() => undefined) : undefined,
    ),
  );
  return {
    until: new Date(Date.now() + (options.warmMs ?? 0)).toISOString(),
    agent: agentId,
    gate: gate?.id,
    nextTurn: turn + 1,
    bytes: held.reduce<number>((a, b) => a + (b ?? 0), 0),
    key: meta.warmKey,
    ...(scope ? { scope } : {}),
  };
}

/**
 * Wait for the end of a bottle's running turn (its agent's exit), record it in
 * the bottle's meta and freeze the bottle. Works for a turn this process
 * started and for one a process before it started (an orchestrator killed
 * mid-turn and started again). When the agent container is gone, the bottle is
 * frozen with `vanished: true`; when the bottle is already frozen (the turn
 * ended while nobody waited), the last turn's end is returned.
 */
export async function finishTurn(slug: string, options: BottleOptions): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  const meta = readMeta(slug, env);
  if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug} in ${homeLayout(env).bottles}`);
  // The last turn's end, as the meta has it.
  const lastEnd = (): TurnOutcome => {
    const last = meta.turns.at(-1);
    return {
      slug,
      exitCode: last?.exitCode ?? -1,
      ok: last?.ok ?? false,
      sessionId: meta.sessionId ?? undefined,
      ...(last ? {} : { error: 'the bottle has no finished turn' }),
      output: '',
    };
  };
  // The turn ended and the bottle was frozen, and whoever waited went away before it
  // read the end (a restart).
  if (meta.status === 'frozen' && !meta.current) return lastEnd();
  if (meta.status !== 'running')
    throw new BbError(
      'CONFLICT',
      `bottle ${slug} is ${meta.status}; only a running turn can be finished`,
    );
  if (!meta.current) {
    // Running with no turn in progress: nothing to wait for (its end was written, the
    // bottle not yet frozen). Frozen now.
    await freeze(slug, options);
    return lastEnd();
  }
  // Its turn ran on another engine (a shared store's bottle whose replica is gone):
  // nothing of it is here to wait for.
  // Only in a shared store: one machine's engine renamed (its host) is the same engine.
  const here =
    meta.engine && homeLayout(env).shared ? await options.backend.identity?.() : undefined;
  const elsewhere = here !== undefined && meta.engine !== here ? meta.engine : undefined;
  const containers = elsewhere ? [] : await options.backend.list({ [LABEL.slug]: slug });
  // A warm resume cut short between its word and unpausing them: the turn was given
  // (its command is there), so its containers go on.
  for (const c of containers)
    if (c.state === 'paused') await options.backend.rehydrate(c.id).catch(() => {});
  const agentC = containers.find((c) => c.labels[LABEL.role] === 'agent');
  if (!agentC) {
    meta.turns.push({
      ...meta.current,
      exitCode: -1,
      ok: false,
      finishedAt: new Date().toISOString(),
    });
    meta.current = null;
    writeMeta(meta, env);
    await freeze(slug, options);
    return {
      slug,
      exitCode: -1,
      ok: false,
      sessionId: meta.sessionId ?? undefined,
      error: elsewhere
        ? `the turn ran on engine ${elsewhere}, not this one: it was lost with the machine that ran it`
        : 'the agent container was gone',
      output: '',
      vanished: true,
      ...(elsewhere ? { lostWith: elsewhere } : {}),
    };
  }
  try {
    return await completeTurn(meta, agentC.id, options, env);
  } catch (err) {
    // Another host's bottle now: only what of it runs on this engine goes (its meta,
    // secrets and files are theirs).
    if ((err as BbError<{ endedElsewhere?: boolean }>).data?.endedElsewhere)
      await releaseHere(slug, options).catch(() => false);
    else await freeze(slug, options).catch(() => {});
    throw err;
  }
}

/** Finish the turn of a bottle whose runner went away: `finishTurn` by its older name. */
export const reattach = finishTurn;

/**
 * Stop a running bottle's agent (SIGTERM, then SIGKILL after `timeoutMs`): its
 * turn then ends the ordinary way, through `finishTurn`. Idempotent.
 */
export async function stopAgent(
  slug: string,
  options: BottleOptions,
  timeoutMs = 5000,
): Promise<void> {
  for (const c of await options.backend.list({ [LABEL.slug]: slug }))
    if (c.labels[LABEL.role] === 'agent' && (c.state === 'running' || c.state === 'paused'))
      await options.backend.stop(c.id, timeoutMs);
}
