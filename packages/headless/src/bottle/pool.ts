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
import { mkdirSync, rmdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { dirname, join } from 'node:path';
import { BbError } from '@bb/errors';
import { checkSiteEnv } from '@bb/forge';
import { homeLayout, LABEL } from '@bb/names';
import pkg from '../../package.json' with { type: 'json' };
import type { BottleSpec } from '../engine/backend';
import { canMountDisks, diskQuota, makeDisk } from '../engine/disk';
import { makeSlot, slotMirror } from '../engine/mirror-slot';
import {
  type BottleOptions,
  destroy,
  gateImage,
  gateOptions,
  newBottleManifests,
  prepareDirs,
  releaseHolder,
  SLUG,
} from './bottle-parts';
import { bottleLabels, bridgeMappings, createGate, propagateSlot, routeSecrets } from './gate';
import {
  AGENT_USER,
  type BottleMeta,
  bottleDir,
  bottlePaths,
  IN_BOTTLE,
  pathsFor,
  userSpec,
  writeMeta,
} from './layout';
import type { BottlePlan } from './plan';
import { hostMounts, hostPlan, hostSources, supervises } from './plan-host';
import { writeCurrentConfig } from './supervise-gate';
import { canKeepWarm, TURN_END_DIR } from './warm';
import { initWorkspace } from './workspace';

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
        // The route keys' values (a rotated key): its gate was given them when it was made.
        routeKeys: plan.proxyFiles
          ? createHash('sha256')
              .update(JSON.stringify(routeSecrets(plan.config.routes, env)))
              .digest('hex')
          : null,
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
 * A new slug for a pooled bottle of `agent`, claimed: its directory made here and
 * now (an exclusive mkdir: never another bottle's, frozen ones included) and no
 * container of the engine carries it.
 */
async function claimSlug(
  agent: string,
  o: Pick<BottleOptions, 'backend'>,
  env: Record<string, string | undefined>,
): Promise<string> {
  for (let i = 0; i < 8; i++) {
    const slug = `${agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
    if (!SLUG.test(slug))
      throw new BbError(
        'INVALID_INPUT',
        `agent ${JSON.stringify(agent)} makes bottle names longer than ${SLUG.source} allows: give it a shorter name to pool it`,
      );
    const dir = bottleDir(slug, env);
    mkdirSync(dirname(dir), { recursive: true, mode: 0o755 });
    try {
      mkdirSync(dir, { mode: 0o755 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw err;
    }
    if ((await o.backend.list({ [LABEL.slug]: slug })).length === 0) return slug;
    rmdirSync(dir);
  }
  throw new BbError(
    'CONFLICT',
    `no free bottle name for a pooled ${agent} after 8 tries: remove old bottles (bb gc)`,
  );
}

/**
 * Whether a bottle is a pooled one whose pool is alive (its process, on this
 * machine, still runs): then it is that pool's to hand out, and no reconcile of
 * another process's removes it. A pooled bottle whose process is gone is a
 * leftover: nobody will ever bind it.
 */
export function heldByLivePool(meta: Pick<BottleMeta, 'pooled'> | undefined): boolean {
  const owner = meta?.pooled?.owner;
  if (!owner || owner.host !== hostname()) return false;
  try {
    process.kill(owner.pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
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
  const { agent, names, bottles, image } = newBottleManifests(o.agent, o.bottles, env);
  const first = bottles[0]!;
  checkSiteEnv(o.forge.kind, o.forge.site);
  const quota = diskQuota(first.resources.disk, env);
  if (homeLayout(env).shared && quota === undefined)
    throw new BbError(
      'INVALID_INPUT',
      `BB_BOTTLE_STORE keeps each bottle's workspace and home on its own disk image: bottle ${names[0]} gets none (give it a disk quota)`,
    );
  const [engine] = await Promise.all([
    backend.identity?.(),
    ...[...new Set([image, gateImage(o, env)])].map((i) => backend.ensureImage(i)),
  ]);
  // Its own from here: nothing of it is anyone else's to remove.
  const slug = await claimSlug(o.agent, o, env);
  const p = bottlePaths(slug, env);
  const since = new Date().toISOString();
  const meta: BottleMeta = {
    slug,
    agent: o.agent,
    bottles: names,
    backend: backend.name,
    image,
    baseImage: image,
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
    pooled: { since, key: '', gate: '', agent: '', owner: { host: hostname(), pid: process.pid } },
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
    // Its namespace lives on with the waiter in it (see `releaseHolder`).
    if (netns) await releaseHolder(backend, netns);
    meta.pooled = {
      ...meta.pooled!,
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
