/**
 * A bottle's turns: what a turn runs (`planTurn`), starting it in new containers
 * or in warm ones, and waiting for its end, then freezing or keeping it warm.
 */
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, isBbError, redactString } from '@bb/errors';
import { BASE_FILE } from '@bb/forge-sidecar';
import { loadPolicy } from '@bb/supervise';
import { readHeadAsData, writeFileNoFollow } from '@bb/wall';
import type { BottleSpec } from '../engine/backend';
import { bbHome } from '../home';
import {
  type BottleOptions,
  cloneTimeoutMs,
  createTurnGate,
  freeze,
  gateImage,
  gateOptions,
  owners,
  prBranchHead,
  prepareDirs,
  type ResumeOptions,
  releaseHolder,
  type StartedTurn,
  writeTurnFile,
} from './bottle-parts';
import {
  awaitGate,
  bottleLabels,
  bridgeMappings,
  bridgePrelude,
  type CreatedGate,
  proxySocketsScript,
  routeSecrets,
} from './gate';
import { holdNewGate, writeHold } from './hold';
import { AGENT_USER, type BottleMeta, bottlePaths, pathsFor, userSpec, writeMeta } from './layout';
import type { AgentManifest, BottleManifest } from './manifests';
import { type BottlePlan, needsProxies, syncsPr } from './plan';
import { hostMounts, hostPlan, hostSources, insideFor, supervises } from './plan-host';
import { awaitWorkspaceScript, takeBundleScript, WORKSPACE_READY } from './pr-sync';
import { allowedBases, grantDrift } from './supervise-gate';
import { turnThenWaitScript } from './waiter';
import { canKeepWarm, TURN_END_DIR, turnNonce, warmKey, writeTurnCommand } from './warm';

/** What a launch makes alongside its first turn's agent container. */
export interface LaunchParts {
  /** The gate, created and started. */
  gate: Promise<CreatedGate | undefined>;
  /** The bottle's disk, mounted, its workspace and home directories made. */
  disk: Promise<void>;
  /** The workspace checked out: the agent's program starts once it is. */
  workspace: Promise<void>;
}

/**
 * A turn as this host runs it, the same whether its container is new or warm:
 * the bottle's plan, and the shell lines run before the agent's command.
 */
export interface TurnPlan {
  /** The bottle's plan for the turn: its agent's command, variables, home files, workdir. */
  bottle: BottlePlan;
  proxies: boolean;
  /** The turn's command, its prelude included. */
  argv: string[];
  /** The shell lines run before the agent's command. */
  prelude: string[];
}

/** What one turn of a bottle runs with. */
export interface TurnStart {
  meta: BottleMeta;
  agent: AgentManifest;
  bottles: BottleManifest[];
  prompt: string;
  /** The forge token the turn's gate holds. */
  token: string | undefined;
  options: BottleOptions;
  env: Record<string, string | undefined>;
}

export function planTurn(
  input: TurnStart,
  /** `underWaiter`: a warm bottle's waiter runs it (and serves its bridge). */
  how: { launch: boolean; underWaiter: boolean; waiter?: boolean },
): TurnPlan {
  const { meta, agent, bottles, prompt, token, options, env } = input;
  const { backend } = options;
  const gate = gateOptions(options, env);
  const plan = hostPlan(meta, agent, bottles, prompt, {
    backend,
    runtime: gate.runtime,
    env,
    forgeToken: !!token,
    waiter: !!how.waiter,
  });
  const P = insideFor(backend, bottlePaths(meta.slug, env), gate.runtime, meta.slug, env);
  const proxies = !!plan.proxyFiles;
  // Supervised with nothing allowed yet, the proxies stand by for an approval: nothing
  // is reachable through them before one, so the agent does not wait for them.
  const standby = proxies && !needsProxies(plan.config);
  // Before the agent: the PR branch's bundle is taken in (a resumed forge bottle), and
  // with proxies the in-bottle bridge (TCP on 127.0.0.1 to the mounted sockets) is
  // up (the waiter serves it for every turn; without one, the turn starts it).
  const bridge = how.underWaiter
    ? standby
      ? []
      : [proxySocketsScript(P.socketDir)]
    : [bridgePrelude(P.runtime, P.socketDir, { wait: !standby })];
  const prelude = [
    // A launch: the container starts while the workspace is made; the agent once it is.
    ...(how.launch ? [awaitWorkspaceScript(P.socketDir, 3 * cloneTimeoutMs(env))] : []),
    ...(meta.forge ? [takeBundleScript()] : []),
    ...(proxies ? bridge : []),
  ];
  const cmd = plan.agent.cmd;
  return {
    bottle: plan,
    proxies,
    argv:
      prelude.length > 0
        ? ['sh', '-c', `${prelude.join('\n')}\nexec "$@"`, 'bb-agent', ...cmd]
        : cmd,
    prelude,
  };
}

/**
 * What a turn's containers are made for (`warmKey`): the manifests' and the
 * operator's configuration and limits, the route secrets' values (a rotated
 * key), the supervise policy, the images, forge and token. Asked only of warm
 * bottles.
 */
export function turnKey(
  meta: BottleMeta,
  bottles: BottleManifest[],
  plan: TurnPlan,
  token: string | undefined,
  options: BottleOptions,
  env: Record<string, string | undefined>,
): string {
  const supervised = supervises(env);
  return warmKey({
    meta,
    gateImage: gateImage(options, env),
    config: {
      config: plan.bottle.config,
      resources: bottles[0]?.resources,
      secrets: plan.proxies
        ? createHash('sha256')
            .update(JSON.stringify(routeSecrets(plan.bottle.config.routes, env)))
            .digest('hex')
        : null,
      policy: supervised
        ? { policy: loadPolicy(bbHome(env)), bases: allowedBases(meta, env) }
        : null,
    },
    token,
    supervised,
  });
}

export async function startTurn(
  input: TurnStart,
  /** A launch's parts, made alongside: the agent's container is created meanwhile. */
  launch?: LaunchParts,
): Promise<StartedTurn> {
  const { meta, agent, bottles, prompt, token, options, env } = input;
  const early = launch?.gate;
  const workspaceReady = launch?.workspace;
  const { backend } = options;
  const progress = options.onProgress ?? (() => {});
  const p = bottlePaths(meta.slug, env);
  const gate = gateOptions(options, env);
  const P = pathsFor(backend, p, gate.runtime, '');
  // Kept warm after the turn: the agent's container runs the waiter, which runs the turn.
  const waiter = canKeepWarm(backend) && (options.warmMs ?? 0) > 0;
  // A launch's gate has its hold already; a new turn's gate gets its own id.
  const holdUntil = launch ? options.holdUntil?.() : holdNewGate(meta, options.holdUntil, env);
  // The container's own turn runs before its waiter starts (after it, the waiter waits).
  const plan = planTurn(input, {
    launch: !!workspaceReady,
    underWaiter: false,
    waiter,
  });
  const { turn } = plan.bottle;
  const startedAt = new Date().toISOString();
  let gateStarted: Promise<CreatedGate | undefined> | undefined;
  let created: Promise<string> | undefined;
  let netns: string | undefined;
  try {
    const nonce = turnNonce();
    const agentSpec: BottleSpec = {
      name: `bb-${meta.slug}-agent`,
      image: plan.bottle.agent.image,
      cmd: waiter
        ? [
            'sh',
            '-c',
            [...plan.prelude, turnThenWaitScript(P.runtime)].join('\n'),
            'bb-agent',
            ...plan.bottle.agent.cmd,
          ]
        : plan.argv,
      // The image may be the agent's own rebuild: its ENTRYPOINT runs nothing here.
      entrypoint: [],
      user: userSpec(AGENT_USER),
      workdir: plan.bottle.agent.workdir,
      labels: bottleLabels(meta, 'agent', env),
      network: 'none',
      readOnlyRootfs: true,
      tmpfs: { '/tmp': 'rw,size=256m' },
      // With the waiter's own (it drops them from later turns, whose commands carry
      // their own environment).
      env: waiter
        ? {
            ...plan.bottle.agent.env,
            BB_TURN_COMMANDS: P.turns,
            BB_TURN_STATUS: `${P.home}/${TURN_END_DIR}`,
            BB_AFTER_TURN: String(turn),
            BB_WAITER_KILL_ALL: '1',
            // This turn's own variables: none of them reaches a later turn.
            BB_TURN_ENV: Object.keys(plan.bottle.agent.env).join(' '),
            BB_TURN_NONCE: nonce,
            ...(plan.proxies ? { BB_BRIDGE: bridgeMappings(P.socketDir).join(' ') } : {}),
          }
        : plan.bottle.agent.env,
      // The waiter's turns leave orphans: an init reaps them.
      ...(waiter ? { init: true } : {}),
      mounts: hostMounts(plan.bottle.agent.mounts, hostSources(p, gate.runtime, meta, env)),
      resources: plan.bottle.agent.limits,
    };
    if (workspaceReady) rmSync(join(p.sock, WORKSPACE_READY), { force: true });
    // Created while a launch's disk is made (its mounts are resolved when it starts), in
    // an empty network namespace made ahead of time when the backend has one ready.
    created = (async () => {
      netns = await backend.takeNetns?.().catch(() => undefined);
      if (netns) agentSpec.netns = netns;
      try {
        return await backend.create(agentSpec);
      } catch (err) {
        // Out of the pool and joined by nothing: nobody else would remove the holder.
        if (netns) await backend.destroy(netns).catch(() => {});
        throw err;
      }
    })();
    created.catch(() => {});
    if (launch) await launch.disk;
    // Into the agent's home, which it owns: never through a symlink it planted.
    const { agent: agentOwner } = owners(backend);
    for (const [rel, content] of Object.entries(plan.bottle.agent.files))
      writeFileNoFollow(p.home, rel, content, { owner: agentOwner });
    prepareDirs(p, backend);
    if (holdUntil !== undefined) writeHold(p, meta, holdUntil);
    meta.current = { turn, prompt, startedAt, ...(waiter ? { waiter: true, nonce } : {}) };
    if (meta.forge) writeTurnFile(p, turn);
    if (waiter)
      meta.warmKey = turnKey(meta, bottles, plan, options.forgeTokenKey ?? token, options, env);
    else delete meta.warmKey;
    meta.warm = null;
    writeMeta(meta, env);
    // Started early by launch (alongside the clone), or now.
    gateStarted =
      early ??
      createTurnGate(meta, plan.bottle, token, gate).then(async (g) => {
        if (g) await backend.start(g.id);
        return g;
      });
    // Awaited below; until then a failure must not count as unhandled. Its secrets'
    // files go as soon as it serves (not once the workspace is made).
    gateStarted.catch(() => {});
    const gateUp = gateStarted.then((g) => (g ? awaitGate(backend, g, meta.slug) : undefined));
    gateUp.catch(() => {});
    progress(`running ${agent.provider} agent (turn ${turn})`);
    const aid = await created;
    await options.fence?.();
    await backend.start(aid);
    // The namespace lives on with the agent's processes in it: its holder (one more
    // container and shim for the bottle's whole life) goes, off the turn's path.
    if (netns) void releaseHolder(backend, netns);
    if (workspaceReady) {
      // The agent's program starts once its workspace is made, while its gate may still be
      // coming up: its clients wait for the gate's sockets (and the bridge, for the proxies').
      await workspaceReady;
      // The clone may have taken long: asked again before anything of the agent runs.
      try {
        await options.fence?.();
      } catch (err) {
        await backend.stop(aid, 1000).catch(() => {});
        throw err;
      }
      // Into the gate's directory, following no link: the launch's base for its pushes,
      // then the word that lets the agent's program start.
      if (meta.baseCommit)
        writeFileNoFollow(p.sock, BASE_FILE, `${meta.baseCommit}\n`, { createDirs: false });
      writeFileNoFollow(p.sock, WORKSPACE_READY, '', { createDirs: false });
    }
    try {
      // Serving every socket, its secrets read (their files go): or the agent stops.
      await gateUp;
    } catch (err) {
      await backend.stop(aid, 1000).catch(() => {});
      throw err;
    }
    if (workspaceReady) {
      // From here its program reaches the forge: a restart must watch it, not remove it
      // (before, with no gate, it could do nothing outside its bottle).
      meta.preparing = false;
      writeMeta(meta, env);
    }
    return { slug: meta.slug, turn };
  } catch (err) {
    // A failed turn leaves the bottle frozen, its workspace and session intact
    // (a clone still running, or a container still being created or started, is let
    // finish first: its disk is unmounted, the container removed; a gate started after
    // the freeze would run on, its workspace the directory under the unmounted disk).
    await created?.catch(() => {});
    await (gateStarted ?? early)?.catch(() => {});
    await workspaceReady?.catch(() => {});
    await freeze(meta.slug, options).catch(() => {});
    throw isBbError(err)
      ? err
      : new BbError(
          'BACKEND_ERROR',
          `turn ${turn} of ${meta.slug} failed: ${redactString((err as Error).message)}`,
          { cause: err },
        );
  }
}

/**
 * The next turn in a warm bottle's containers, when they can serve it: inside
 * its window, made for the same image, configuration, forge and token, both
 * still paused, and its PR branch on the forge where the checkout is (nobody
 * pushed since), its gate's scope holding the turn's PR. Otherwise why not, in
 * words: the caller cools it and starts the turn the ordinary way.
 */
export async function resumeWarm(
  meta: BottleMeta,
  agent: AgentManifest,
  bottles: BottleManifest[],
  options: ResumeOptions,
  env: Record<string, string | undefined>,
): Promise<StartedTurn | string> {
  const { backend } = options;
  const w = meta.warm;
  if (!w || !canKeepWarm(backend) || (options.warmMs ?? 0) <= 0) return 'warm bottles are off';
  if (Date.parse(w.until) <= Date.now()) return 'its warm window is over';
  if (meta.turns.length + 1 !== w.nextTurn) return 'its turns are not where its waiter is';
  const p = bottlePaths(meta.slug, env);
  // Where the PR branch is on the forge, asked while the rest goes on: the warm checkout
  // serves only when it is there (then nothing needs bringing over).
  const pr = syncsPr(meta);
  if (pr && !(meta.forge && options.forgeToken)) return 'where its PR branch is cannot be asked';
  const remote = pr ? prBranchHead(meta, options, env) : undefined;
  remote?.catch(() => {});
  if (pr) meta.syncPr = false;
  const plan = planTurn(
    { meta, agent, bottles, prompt: options.prompt, token: options.forgeToken, options, env },
    { launch: false, underWaiter: true },
  );
  if (
    turnKey(meta, bottles, plan, options.forgeTokenKey ?? options.forgeToken, options, env) !==
    w.key
  )
    return 'what its containers were made for changed (image, configuration, forge or token)';
  // A grant scoped to the last turn ended with it: its gate may not serve this one (I9).
  const drift = grantDrift(meta.slug, plan.bottle.config, plan.proxies, env);
  if (drift) return drift;
  // The PR this turn may write to must be in its gate's scope (it opened it, or was made with it).
  const n = meta.forge?.pr;
  if (meta.forge && n !== undefined && !w.scope?.includes(n))
    return `its gate may not write to PR #${n}`;
  const [agentNow, gateNow] = await Promise.all(
    [w.agent, w.gate].map((id) => (id ? backend.inspect(id).catch(() => undefined) : undefined)),
  );
  if (agentNow?.state !== 'paused' || (w.gate && gateNow?.state !== 'paused'))
    return 'its containers are not both paused';
  // The image's name may have been given to a rebuilt image meanwhile.
  const wanted = await backend.imageId?.(meta.image);
  if (wanted && agentNow.imageId && wanted !== agentNow.imageId) return 'its image was rebuilt';
  if (remote) {
    let here: string | undefined;
    try {
      here = readHeadAsData(p.workspace);
    } catch {}
    const there = await remote.catch(() => undefined);
    if (!there || there !== here) return 'its PR branch moved on the forge';
  }
  const { agent: agentOwner } = owners(backend);
  for (const [rel, content] of Object.entries(plan.bottle.agent.files))
    writeFileNoFollow(p.home, rel, content, { owner: agentOwner });
  options.onProgress?.(`resuming warm bottle ${meta.slug} (turn ${plan.bottle.turn})`);
  const nonce = turnNonce();
  meta.current = {
    turn: plan.bottle.turn,
    prompt: options.prompt,
    startedAt: new Date().toISOString(),
    waiter: true,
    nonce,
  };
  meta.status = 'running';
  meta.warm = null;
  writeMeta(meta, env);
  // The gate's turn, then the waiter's command: both before either runs again, so the
  // agent's first call already finds the new turn (the gate reads it at each write),
  // and its hold renewed (it ran out while the bottle was idle).
  const holdUntil = options.holdUntil?.();
  if (holdUntil !== undefined) writeHold(p, meta, holdUntil);
  if (meta.forge) writeTurnFile(p, plan.bottle.turn);
  writeTurnCommand(p, plan.bottle.turn, {
    argv: plan.argv,
    env: plan.bottle.agent.env,
    cwd: plan.bottle.agent.workdir,
    nonce,
  });
  await Promise.all([w.agent, ...(w.gate ? [w.gate] : [])].map((id) => backend.rehydrate(id)));
  return { slug: meta.slug, turn: plan.bottle.turn };
}
