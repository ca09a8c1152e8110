/**
 * Binding a pooled bottle (`pool.ts`) to a launch's issue: the gate given its
 * secrets and configuration, the repository's mirror mounted into the running
 * containers, the workspace checked out, the turn handed to the waiter.
 */
import { join } from 'node:path';
import { BbError, registerSecret } from '@bb/errors';
import { checkBottleBranch, checkSiteEnv, forgeKinds } from '@bb/forge';
import { BASE_FILE } from '@bb/forge-sidecar';
import { chownTreeNoFollow, readHeadAsData, writeFileNoFollow } from '@bb/wall';
import { fillSlot } from '../engine/mirror-slot';
import {
  cloneTimeoutMs,
  destroy,
  gateOptions,
  type LaunchOptions,
  owners,
  type StartedTurn,
  writeTurnFile,
} from './bottle-parts';
import { awaitGate, gateEnv, writePlanSecrets } from './gate';
import { BIND_FILE } from './gate-bind';
import { holdNewGate, writeHold } from './hold';
import { type BottleMeta, bottlePaths, IN_BOTTLE, readMeta, writeMeta } from './layout';
import { loadAgentManifest, loadBottleManifest } from './manifests';
import { initMirror, mirrorDir, syncMirror } from './mirror';
import { poolKey } from './pool';
import { replaceSecret } from './secrets';
import { writeCurrentConfig } from './supervise-gate';
import { planTurn, turnKey } from './turns';
import { canKeepWarm, turnNonce, writeTurnCommand } from './warm';
import { prepareWorkspace } from './workspace';

/** Why a pooled bottle cannot serve this launch, in words, or undefined when it can. */
async function unusable(
  meta: BottleMeta,
  options: LaunchOptions,
  key: string,
): Promise<string | undefined> {
  const pooled = meta.pooled!;
  if (meta.agent !== options.agent) return `it was made for agent ${meta.agent}`;
  if (key !== pooled.key)
    return 'what its containers were made for changed (image, configuration, limits or version)';
  const states = await Promise.all(
    [pooled.gate, pooled.agent].map((id) => options.backend.inspect(id).catch(() => undefined)),
  );
  if (!states.every((s) => s?.state === 'running')) return 'its containers are not both running';
  return undefined;
}

/**
 * Bind the pooled bottle `options.slug` to the launch's issue and start its first
 * turn: returns once its agent's turn is handed over and its gate serves (as
 * `startLaunch` does). Undefined when the bottle cannot serve this launch (made for
 * other settings, a container gone): it is removed, and the caller launches the
 * ordinary way under the same slug. On a failure past that, nothing of it stays.
 */
export async function bindPooled(
  options: LaunchOptions & { slug: string },
): Promise<StartedTurn | undefined> {
  const env = options.env ?? process.env;
  const progress = options.onProgress ?? (() => {});
  const { backend, slug } = options;
  const read = readMeta(slug, env);
  const pooled = read?.pooled;
  if (!read || !pooled) return undefined;
  const meta: BottleMeta = read;
  if (!options.forge) {
    await destroy(slug, options);
    return undefined;
  }
  /** The launch's plan for this bottle, its meta given the issue (not written yet). */
  async function planBind() {
    const forge = options.forge!;
    registerSecret(forge.token);
    checkSiteEnv(forge.kind, forge.site);
    const { manifest: agent } = loadAgentManifest(meta.agent, env);
    const bottles = (options.bottles ?? meta.bottles).map(
      (b) => loadBottleManifest(b, env).manifest,
    );
    meta.bottles = options.bottles ?? meta.bottles;
    const cloneMs = cloneTimeoutMs(env);
    const p = bottlePaths(slug, env);
    meta.forge = {
      kind: forge.kind,
      site: forge.site,
      owner: forge.owner,
      repo: forge.repo,
      issue: forge.issue,
      pr: forge.pr,
      cloneUrl: forge.cloneUrl,
    };
    meta.branch = checkBottleBranch(forgeKinds.get(forge.kind), meta.agent, forge.issue);
    meta.mirror = mirrorDir(forge.cloneUrl, env);
    const input = {
      meta,
      agent,
      bottles,
      prompt: options.prompt,
      token: forge.token,
      options,
      env,
    };
    const turn = planTurn(input, { launch: false, underWaiter: true, waiter: true });
    return { forge, agent, bottles, cloneMs, p, turn, mirror: meta.mirror };
  }
  // Taken out of the pool for this launch: whatever fails from here, it goes.
  let planned: Awaited<ReturnType<typeof planBind>>;
  try {
    planned = await planBind();
    const why = await unusable(
      meta,
      options,
      poolKey(meta, planned.turn.bottle, planned.agent.git, options, env),
    );
    if (why) {
      progress(`pooled bottle ${slug} cannot serve this launch (${why}): launching afresh`);
      await destroy(slug, options);
      return undefined;
    }
  } catch (err) {
    await destroy(slug, options).catch(() => {});
    throw err;
  }
  const { forge, agent, bottles, cloneMs, p, turn, mirror } = planned;
  progress(`binding pooled bottle ${slug} to ${forge.owner}/${forge.repo}#${forge.issue}`);
  // The repository is fetched into its mirror from the first moment.
  const synced = syncMirror(forge, env, cloneMs, options.defaultHead?.());
  synced.catch(() => {});
  try {
    await initMirror(mirror);
    delete meta.pooled;
    const holdUntil = holdNewGate(meta, options.holdUntil, env);
    writeMeta(meta, env);
    if (holdUntil !== undefined) writeHold(p, meta, holdUntil);
    writeCurrentConfig(slug, turn.bottle.config, env);
    if (meta.forge) writeTurnFile(p, turn.bottle.turn);
    // The gate first (its surfaces take longest to come up): its token, then its
    // configuration, the word that starts them. It reads nothing of the mirror yet.
    const { agent: agentOwner, gate: gateOwner } = owners(backend);
    // Its secrets (the token, the route keys) only now: none waited in the pool.
    const secrets = writePlanSecrets(turn.bottle, slug, 'gate', forge.token, env, gateOwner);
    if (!secrets) throw new BbError('INTERNAL', `the gate of ${slug} was planned with no token`);
    const gate = gateOptions(options, env);
    replaceSecret(secrets, BIND_FILE, JSON.stringify(gateEnv(meta, turn.bottle, gate)), gateOwner);
    const gateUp = awaitGate(
      backend,
      {
        id: pooled.gate,
        sockets: (turn.bottle.gate?.sockets ?? []).map((s) => join(p.sock, s)),
        secrets,
      },
      slug,
    );
    gateUp.catch(() => {});
    // Meanwhile the mirror is mounted into both running containers and the workspace
    // checked out from it on the host.
    const slotted = fillSlot(p.dir, mirror);
    slotted.catch(() => {});
    const checkedOut = prepareWorkspace({
      workspace: p.workspace,
      forge,
      branch: meta.branch,
      identity: agent.git,
      timeoutMs: cloneMs,
      env,
      mirrorInBottle: IN_BOTTLE.mirror,
      onProgress: progress,
      synced,
      initialized: true,
    });
    checkedOut.catch(() => {});
    const [slot, checkout] = await Promise.allSettled([slotted, checkedOut]);
    if (slot.status === 'rejected') throw slot.reason;
    if (checkout.status === 'rejected') throw checkout.reason;
    meta.baseCommit = readHeadAsData(p.workspace) ?? null;
    // Ownership is set once, before the agent ever runs; never again through what it made.
    if (agentOwner) await chownTreeNoFollow(agentOwner, p.workspace, p.home);
    for (const [rel, content] of Object.entries(turn.bottle.agent.files))
      writeFileNoFollow(p.home, rel, content, { owner: agentOwner });
    const nonce = turnNonce();
    meta.current = {
      turn: turn.bottle.turn,
      prompt: options.prompt,
      startedAt: new Date().toISOString(),
      waiter: true,
      nonce,
    };
    if (canKeepWarm(backend) && (options.warmMs ?? 0) > 0)
      meta.warmKey = turnKey(
        meta,
        bottles,
        turn,
        options.forgeTokenKey ?? forge.token,
        options,
        env,
      );
    meta.warm = null;
    writeMeta(meta, env);
    await options.fence?.();
    if (meta.baseCommit)
      writeFileNoFollow(p.sock, BASE_FILE, `${meta.baseCommit}\n`, { createDirs: false });
    progress(`running ${agent.provider} agent (turn ${turn.bottle.turn})`);
    writeTurnCommand(p, turn.bottle.turn, {
      argv: turn.argv,
      env: turn.bottle.agent.env,
      cwd: turn.bottle.agent.workdir,
      nonce,
    });
    try {
      await gateUp;
    } catch (err) {
      await backend.stop(pooled.agent, 1000).catch(() => {});
      throw err;
    }
    meta.preparing = false;
    writeMeta(meta, env);
    return { slug, turn: turn.bottle.turn };
  } catch (err) {
    await synced.catch(() => {});
    if (readMeta(slug, env)?.preparing !== false) await destroy(slug, options);
    throw err;
  }
}
