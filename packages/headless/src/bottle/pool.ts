/**
 * The warm pool: bottles made ahead of need for an agent. Everything of a bottle
 * that does not depend on its issue is done beforehand: its containers created
 * and started, its disk made and mounted, its network namespace taken, its gate's
 * process up with its code loaded (no forge settings, no token, no repository),
 * its agent container's waiter waiting for a first turn. Binding it to an issue
 * hands the gate its configuration and token, checks the workspace out from the
 * repository's mirror (mounted into the running containers through the mirror
 * slot) and gives the waiter the turn. A pooled bottle is used once: from then on
 * it is an ordinary bottle, frozen, resumed and destroyed as any other.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, registerSecret } from '@bb/errors';
import { checkBottleBranch, checkSiteEnv, forgeKinds } from '@bb/forge';
import { BASE_FILE } from '@bb/forge-sidecar';
import { homeLayout } from '@bb/names';
import { chownTreeNoFollow, readHeadAsData, writeFileNoFollow } from '@bb/wall';
import pkg from '../../package.json' with { type: 'json' };
import type { BottleSpec } from '../engine/backend';
import { canMountDisks, diskQuota, makeDisk } from '../engine/disk';
import { fillSlot, makeSlot, slotMirror } from '../engine/mirror-slot';
import { providerFor } from '../providers';
import {
  type BottleOptions,
  cloneTimeoutMs,
  destroy,
  gateImage,
  gateOptions,
  type LaunchOptions,
  owners,
  prepareDirs,
  type StartedTurn,
  writeTurnFile,
} from './bottle-parts';
import {
  awaitGate,
  bottleLabels,
  bridgeMappings,
  createGate,
  gateEnv,
  propagateSlot,
} from './gate';
import { BIND_FILE } from './gate-bind';
import { holdNewGate, writeHold } from './hold';
import {
  AGENT_USER,
  type BottleMeta,
  bottlePaths,
  IN_BOTTLE,
  pathsFor,
  readMeta,
  userSpec,
  writeMeta,
} from './layout';
import { loadAgentManifest, loadBottleManifest } from './manifests';
import { initMirror, mirrorDir, syncMirror } from './mirror';
import type { BottlePlan } from './plan';
import { hostMounts, hostPlan, hostSources, supervises } from './plan-host';
import { replaceSecret, writeSecret } from './secrets';
import { writeCurrentConfig } from './supervise-gate';
import { planTurn, turnKey } from './turns';
import { canKeepWarm, TURN_END_DIR, turnNonce, writeTurnCommand } from './warm';
import { initWorkspace, prepareWorkspace } from './workspace';

export interface PoolBottleOptions extends BottleOptions {
  agent: string;
  /** @default the agent's */
  bottles?: string[] | undefined;
  /** Its containers' extra labels (a launch's `labels`): they cannot change once made. */
  labels?: Record<string, string> | undefined;
  /**
   * The forge its issue will be on: the kind and the site's variables (every
   * launch of one orchestrator has the same); the repository comes with the issue.
   */
  forge: { kind: string; site: Record<string, string> };
}

/** Whether bottles can be pooled on this host: an isolating backend whose processes are counted, and root (the mirror slot's mounts). */
export const canPool = (backend: BottleOptions['backend']): boolean =>
  canKeepWarm(backend) && canMountDisks();

/**
 * What a pooled bottle's containers were made for, as a digest: everything that
 * shapes them and does not come with an issue (images, mounts, limits, the
 * gate's surfaces, the proxies' files, labels, the version). A launch whose plan
 * gives another cannot use it.
 */
export function poolKey(
  meta: Pick<BottleMeta, 'bottles' | 'diskBytes' | 'labels'>,
  plan: BottlePlan,
  /** The commit identity its workspace was made with. */
  identity: { name: string; email: string },
  options: BottleOptions,
  env: Record<string, string | undefined>,
): string {
  const g = plan.gate;
  return createHash('sha256')
    .update(
      JSON.stringify({
        version: pkg.version,
        gateImage: gateImage(options, env),
        bottles: meta.bottles,
        disk: meta.diskBytes ?? null,
        labels: Object.entries(meta.labels ?? {}).sort(),
        agent: {
          image: plan.agent.image,
          mounts: plan.agent.mounts,
          limits: plan.agent.limits,
          workdir: plan.agent.workdir,
        },
        gate: g
          ? {
              cmd: g.cmd,
              mounts: g.mounts,
              limits: g.limits,
              network: g.network,
              sockets: g.sockets,
              serves: g.serves,
            }
          : null,
        secrets: Object.keys(plan.secrets).sort(),
        proxyFiles: plan.proxyFiles ?? null,
        supervised: supervises(env),
        identity,
      }),
    )
    .digest('hex');
}

/** A forge bottle's meta as its containers are planned before it has an issue. */
function unboundForge(o: PoolBottleOptions['forge']): NonNullable<BottleMeta['forge']> {
  return {
    kind: o.kind,
    site: o.site,
    owner: 'pool',
    repo: 'pool',
    issue: 1,
    cloneUrl: 'http://pool.invalid/pool/pool.git',
  };
}

/**
 * Make one pooled bottle of `agent`: returns its slug once its containers run
 * (its gate waiting for a bind file, its waiter for turn 1). On a failure nothing
 * of it stays.
 */
export async function makePooled(o: PoolBottleOptions): Promise<string> {
  const env = o.env ?? process.env;
  const { backend } = o;
  if (!canPool(backend))
    throw new BbError(
      'INVALID_INPUT',
      `a warm pool needs root and a backend whose containers' processes can be counted (docker), not ${backend.name}`,
    );
  const { manifest: agent } = loadAgentManifest(o.agent, env);
  const names = o.bottles ?? agent.bottles;
  const bottles = names.map((b) => loadBottleManifest(b, env).manifest);
  const first = bottles[0]!;
  if (!first.image)
    throw new BbError(
      'INVALID_INPUT',
      `bottle ${names[0]} names a dockerfile; building images is not supported yet: give an image`,
    );
  providerFor(agent.provider);
  checkSiteEnv(o.forge.kind, o.forge.site);
  const quota = diskQuota(first.resources.disk, env);
  if (homeLayout(env).shared && quota === undefined)
    throw new BbError(
      'INVALID_INPUT',
      `BB_BOTTLE_STORE keeps each bottle's workspace and home on its own disk image: bottle ${names[0]} gets none (give it a disk quota)`,
    );
  const slug = `${o.agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
  const p = bottlePaths(slug, env);
  const [engine] = await Promise.all([
    backend.identity?.(),
    ...[...new Set([first.image, gateImage(o, env)])].map((i) => backend.ensureImage(i)),
  ]);
  const since = new Date().toISOString();
  const meta: BottleMeta = {
    slug,
    agent: o.agent,
    bottles: names,
    backend: backend.name,
    image: first.image,
    baseImage: first.image,
    status: 'running',
    sessionId: null,
    cwd: IN_BOTTLE.workspace,
    branch: '',
    forge: null,
    turns: [],
    ...(quota !== undefined ? { diskBytes: quota } : {}),
    preparing: true,
    ...(o.labels ? { labels: o.labels } : {}),
    ...(engine ? { engine } : {}),
    pooled: { since, key: '', gate: '', agent: '' },
    createdAt: since,
  };
  prepareDirs(p, backend);
  writeMeta(meta, env);
  try {
    const disk = (async () => {
      if (quota !== undefined) await makeDisk(p, quota, env);
      else mkdirSync(p.disk, { recursive: true, mode: 0o755 });
      for (const d of [p.workspace, join(p.home, '.bb')])
        mkdirSync(d, { recursive: true, mode: 0o755 });
      // The empty repository with the agent's identity: its branch is named when it is bound.
      await initWorkspace({ workspace: p.workspace, identity: agent.git, timeoutMs: 60_000 });
    })();
    disk.catch(() => {});
    await makeSlot(p.dir);
    const slot = join(slotMirror(p.dir), 'objects');
    // Planned as a forge bottle with a mirror: the same mounts and surfaces a launch's get.
    const planned: BottleMeta = {
      ...meta,
      forge: unboundForge(o.forge),
      mirror: slotMirror(p.dir),
      branch: 'bb/pool',
    };
    const gate = gateOptions(o, env);
    const plan = hostPlan(planned, agent, bottles, '', {
      backend,
      runtime: gate.runtime,
      env,
      forgeToken: true,
      waiter: true,
    });
    writeCurrentConfig(slug, plan.config, env);
    const P = pathsFor(backend, p, gate.runtime, '');
    mkdirSync(p.turns, { recursive: true, mode: 0o755 });
    const spec: BottleSpec = {
      name: `bb-${slug}-agent`,
      image: plan.agent.image,
      cmd: ['node', `${P.runtime}/bb-waiter.mjs`],
      entrypoint: [],
      user: userSpec(AGENT_USER),
      workdir: plan.agent.workdir,
      labels: bottleLabels(meta, 'agent', env),
      network: 'none',
      readOnlyRootfs: true,
      tmpfs: { '/tmp': 'rw,size=256m' },
      // The waiter's own variables only: each turn's command carries the turn's.
      env: {
        HOME: P.home,
        BB_TURN_COMMANDS: P.turns,
        BB_TURN_STATUS: `${P.home}/${TURN_END_DIR}`,
        BB_FIRST_TURN: '1',
        BB_WAITER_KILL_ALL: '1',
        ...(plan.proxyFiles ? { BB_BRIDGE: bridgeMappings(P.socketDir).join(' ') } : {}),
      },
      init: true,
      mounts: propagateSlot(
        hostMounts(plan.agent.mounts, hostSources(p, gate.runtime, planned, env)),
        slot,
      ),
      resources: plan.agent.limits,
    };
    const created = createGate(planned, plan, undefined, { ...gate, pooled: { slot } });
    created.catch(() => {});
    const netns = await backend.takeNetns?.().catch(() => undefined);
    if (netns) spec.netns = netns;
    let agentId: string;
    try {
      agentId = await backend.create(spec);
    } catch (err) {
      if (netns) await backend.destroy(netns).catch(() => {});
      throw err;
    }
    // Its workspace and home are given to the agent when it is bound (after the checkout).
    await disk;
    const g = await created;
    if (!g) throw new BbError('INTERNAL', `a pooled bottle of ${o.agent} planned no gate`);
    await Promise.all([backend.start(g.id), backend.start(agentId)]);
    meta.pooled = {
      since,
      key: poolKey(meta, plan, agent.git, o, env),
      gate: g.id,
      agent: agentId,
    };
    writeMeta(meta, env);
    return slug;
  } catch (err) {
    await destroy(slug, o).catch(() => {});
    throw err;
  }
}

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
  const meta = readMeta(slug, env);
  const pooled = meta?.pooled;
  if (!meta || !pooled) return undefined;
  if (!options.forge) {
    await destroy(slug, options);
    return undefined;
  }
  const forge = options.forge;
  registerSecret(forge.token);
  checkSiteEnv(forge.kind, forge.site);
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const bottles = (options.bottles ?? meta.bottles).map((b) => loadBottleManifest(b, env).manifest);
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
  const why = await unusable(meta, options, poolKey(meta, turn.bottle, agent.git, options, env));
  if (why) {
    progress(`pooled bottle ${slug} cannot serve this launch (${why}): launching afresh`);
    await destroy(slug, options);
    return undefined;
  }
  progress(`binding pooled bottle ${slug} to ${forge.owner}/${forge.repo}#${forge.issue}`);
  // The repository is fetched into its mirror from the first moment.
  const synced = syncMirror(forge, env, cloneMs, options.defaultHead?.());
  synced.catch(() => {});
  try {
    await initMirror(meta.mirror);
    delete meta.pooled;
    const holdUntil = holdNewGate(meta, options.holdUntil, env);
    writeMeta(meta, env);
    if (holdUntil !== undefined) writeHold(p, meta, holdUntil);
    writeCurrentConfig(slug, turn.bottle.config, env);
    if (meta.forge) writeTurnFile(p, turn.bottle.turn);
    // The gate first (its surfaces take longest to come up): its token, then its
    // configuration, the word that starts them. It reads nothing of the mirror yet.
    const { agent: agentOwner, gate: gateOwner } = owners(backend);
    const secrets = writeSecret(slug, 'gate', 'token', forge.token, env, gateOwner);
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
    const slotted = fillSlot(p.dir, meta.mirror);
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
