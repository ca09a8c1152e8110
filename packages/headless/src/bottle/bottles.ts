import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, registerSecret } from '@bb/errors';
import { checkBottleBranch, checkSiteEnv, forgeKinds } from '@bb/forge';
import { homeLayout, LABEL } from '@bb/names';
import { chownTreeNoFollow, readHeadAsData, runGit, wallGitEnv } from '@bb/wall';
import { canMountDisks, diskQuota, makeDisk, mountDisk, unmountDisk } from '../engine/disk';
import {
  type BottleOptions,
  cloneTimeoutMs,
  createTurnGate,
  destroy,
  freeze,
  gateImage,
  gateOptions,
  type LaunchOptions,
  migrateLayout,
  newBottleManifests,
  owners,
  prBranchHead,
  prepareDirs,
  type ResumeOptions,
  SLUG,
  type StartedTurn,
  type TurnOutcome,
} from './bottle-parts';
import type { CreatedGate } from './gate';
import { holdNewGate, writeHold } from './hold';
import { type BottleMeta, bottlePaths, IN_BOTTLE, readMeta, writeMeta } from './layout';
import { loadAgentManifest, loadBottleManifest } from './manifests';
import { initMirror, mirrorDir, syncMirror } from './mirror';
import { syncsPr } from './plan';
import { hostPlan } from './plan-host';
import { bindPooled } from './pool-bind';
import { clearPrBundle } from './pr-sync';
import { takeResumeRequest } from './supervise-remedy';
import { finishTurn } from './turn-end';
import { resumeWarm, startTurn } from './turns';
import { prepareWorkspace } from './workspace';

export {
  type BottleOptions,
  destroy,
  freeze,
  type LaunchOptions,
  type ResumeOptions,
  type StartedTurn,
  type TurnOutcome,
} from './bottle-parts';
export { finishTurn, reattach, stopAgent } from './turn-end';

/** Start a bottle for `agent`, run its first turn to the end, and freeze it. */
export async function launch(options: LaunchOptions): Promise<TurnOutcome> {
  const started = await startLaunch(options);
  return continueRebuilt(await finishTurn(started.slug, options), options, options.forge?.token);
}

/**
 * A turn that ended for a capability rebuild (the operator approved a new
 * image) goes on at once: the same session, in a container from the new image,
 * told the decision. At most a few times in a row.
 */
async function continueRebuilt(
  outcome: TurnOutcome,
  options: BottleOptions,
  forgeToken: string | undefined,
): Promise<TurnOutcome> {
  const env = options.env ?? process.env;
  for (let i = 0; i < 5; i++) {
    const asked = takeResumeRequest(outcome.slug, env);
    if (!asked) return outcome;
    options.onProgress?.(`resuming ${outcome.slug} in its rebuilt image (${asked.requestId})`);
    // A turn stopped before its CLI said its session goes on in a fresh one.
    const fresh = !readMeta(outcome.slug, env)?.sessionId;
    const started = await startResume({
      ...options,
      slug: outcome.slug,
      prompt: asked.prompt,
      ...(fresh ? { freshSession: true } : {}),
      ...(forgeToken ? { forgeToken } : {}),
    });
    outcome = await finishTurn(started.slug, options);
  }
  return outcome;
}

/**
 * Start a bottle for `agent`: everything up to its agent running and its
 * sidecar serving, then return (the turn goes on; `finishTurn` waits for it,
 * `stopAgent` ends it early). When anything fails before the agent started,
 * nothing half-made stays behind.
 */
export async function startLaunch(options: LaunchOptions): Promise<StartedTurn> {
  const env = options.env ?? process.env;
  const progress = options.onProgress ?? (() => {});
  // A bottle of the warm pool, taken for this launch: bound to its issue, or (when it
  // cannot serve it) removed, and the launch goes on the ordinary way under its slug.
  if (options.slug && readMeta(options.slug, env)?.pooled) {
    const bound = await bindPooled({ ...options, slug: options.slug });
    if (bound) return bound;
  }
  if (options.forge) registerSecret(options.forge.token);
  // An unknown provider, a bottle with no image and a bad disk size fail before anything is made.
  const {
    agent,
    names: bottleNames,
    bottles,
    image,
  } = newBottleManifests(options.agent, options.bottles, env);
  const first = bottles[0]!;
  const quota = diskQuota(first.resources.disk, env);
  // The agent's own filesystem: its writes stop at the quota, nobody else's do.
  const ownDisk = quota !== undefined && options.backend.isolates && canMountDisks();
  if (homeLayout(env).shared && !ownDisk)
    throw new BbError(
      'INVALID_INPUT',
      `BB_BOTTLE_STORE keeps each bottle's workspace and home on its own disk image, so another machine can mount it: bottle ${bottleNames[0]} gets none here (give it a disk quota, run the orchestrator as root on an isolating backend), or unset BB_BOTTLE_STORE`,
    );
  // A forge that stops answering cannot hold a launch: the clone has a deadline
  // (BB_CLONE_TIMEOUT_MS, default 10 min) and a low-speed limit.
  const cloneMs = cloneTimeoutMs(env);
  const slug = options.slug ?? `${options.agent}-${randomBytes(4).toString('hex').slice(0, 5)}`;
  if (!SLUG.test(slug))
    throw new BbError('INVALID_INPUT', `slug ${JSON.stringify(slug)} must match ${SLUG.source}`);
  const p = bottlePaths(slug, env);
  const sidecarImage = gateImage(options, env);
  const images = [...new Set([image, ...(options.forge ? [sidecarImage] : [])])];
  // Asked of the engine together; a name conflict is reported before a missing image.
  const [taken, engine, ...checked] = await Promise.allSettled([
    options.backend.list({ [LABEL.slug]: slug }),
    options.backend.identity?.(),
    ...images.map((image) => options.backend.ensureImage(image)),
  ]);
  if (taken!.status === 'rejected') throw taken!.reason;
  if (engine!.status === 'rejected') throw engine!.reason;
  if (existsSync(p.dir) || taken!.value.length > 0) {
    throw new BbError(
      'CONFLICT',
      `a bottle named ${slug} already exists: destroy it first or choose another slug`,
    );
  }
  for (const c of checked) if (c.status === 'rejected') throw c.reason;
  // The repository is fetched into its mirror from the first moment: nothing else needs to
  // be made for it.
  const synced = options.forge
    ? syncMirror(options.forge, env, cloneMs, options.defaultHead?.())
    : undefined;
  synced?.catch(() => {});

  // The forge kind's bottle branch convention (the default one for a bottle with no forge).
  if (options.forge) checkSiteEnv(options.forge.kind, options.forge.site);
  const branch = options.forge
    ? checkBottleBranch(forgeKinds.get(options.forge.kind), options.agent, options.forge.issue)
    : `bb/${options.agent}-${slug}`;
  const { agent: agentOwner } = owners(options.backend);
  let early: Promise<CreatedGate | undefined> | undefined;
  let prepared: Promise<void> | undefined;
  let disk: Promise<void> | undefined;
  try {
    progress(`preparing bottle ${slug}`);
    prepareDirs(p, options.backend);
    const meta: BottleMeta = {
      slug,
      agent: options.agent,
      bottles: bottleNames,
      backend: options.backend.name,
      image,
      baseImage: image,
      status: 'running',
      sessionId: null,
      cwd: options.backend.mapsMounts ? IN_BOTTLE.workspace : p.workspace,
      branch,
      forge: options.forge
        ? {
            kind: options.forge.kind,
            site: options.forge.site,
            owner: options.forge.owner,
            repo: options.forge.repo,
            issue: options.forge.issue,
            pr: options.forge.pr,
            cloneUrl: options.forge.cloneUrl,
          }
        : null,
      turns: [],
      ...(ownDisk ? { diskBytes: quota } : {}),
      preparing: true,
      // Made before anything mounts it; fetched into while the workspace is made.
      ...(options.forge
        ? { mirror: await initMirror(mirrorDir(options.forge.cloneUrl, env)) }
        : {}),
      ...(options.labels ? { labels: options.labels } : {}),
      ...(engine!.value ? { engine: engine!.value } : {}),
      createdAt: new Date().toISOString(),
    };
    const holdUntil = holdNewGate(meta, options.holdUntil, env);
    writeMeta(meta, env);
    // Before its gate serves: it writes only while the hold is renewed.
    if (holdUntil !== undefined) writeHold(p, meta, holdUntil);
    const gate = gateOptions(options, env);
    // The gate's and the agent's containers are created while the disk is made (their
    // mounts are resolved when they start, after the disk is mounted).
    const plan = hostPlan(meta, agent, bottles, options.prompt, {
      backend: options.backend,
      runtime: gate.runtime,
      env,
      forgeToken: !!options.forge?.token,
    });
    const created = createTurnGate(meta, plan, options.forge?.token, gate);
    created.catch(() => {});
    disk = (async () => {
      if (ownDisk) await makeDisk(p, quota, env);
      else {
        mkdirSync(p.disk, { recursive: true, mode: 0o755 });
        if (quota !== undefined && options.backend.isolates)
          progress('no disk quota for this bottle: only root can mount one (BB_BOTTLE_DISK)');
      }
      for (const d of [p.workspace, join(p.home, '.bb')])
        mkdirSync(d, { recursive: true, mode: 0o755 });
    })();
    disk.catch(() => {});
    // The gate needs nothing from the workspace to come up: it starts, once its disk
    // is there, while the repository is cloned.
    early = created.then(async (g) => {
      await disk;
      if (g) {
        progress('starting the gate');
        await options.backend.start(g.id);
      }
      return g;
    });
    early.catch(() => {});
    // The workspace is made while the agent's container is created; the agent
    // starts once it is ready.
    prepared = disk
      .then(() =>
        prepareWorkspace({
          workspace: p.workspace,
          forge: options.forge,
          branch,
          identity: agent.git,
          timeoutMs: cloneMs,
          env,
          mirrorInBottle: options.backend.mapsMounts ? IN_BOTTLE.mirror : undefined,
          onProgress: progress,
          synced,
        }),
      )
      .then(async () => {
        meta.baseCommit = readHeadAsData(p.workspace) ?? null;
        // Ownership is set once, before the agent ever runs; never again through what it made.
        if (agentOwner) await chownTreeNoFollow(agentOwner, p.workspace, p.home);
        writeMeta(meta, env);
      });
    prepared.catch(() => {});
    return await startTurn(
      { meta, agent, bottles, prompt: options.prompt, token: options.forge?.token, options, env },
      { gate: early, disk, workspace: prepared },
    );
  } catch (err) {
    // Nothing half-made stays behind (a gate still being created, a clone still
    // running included) while the agent never ran: there is no evidence to keep.
    // Once its program was let start, the bottle stays, frozen, with what it did.
    await disk?.catch(() => {});
    await early?.catch(() => {});
    await prepared?.catch(() => {});
    await synced?.catch(() => {});
    if (readMeta(slug, options.env ?? process.env)?.preparing !== false)
      await destroy(slug, options);
    throw err;
  }
}

/** Rehydrate a frozen bottle, continue the same agent session with a new prompt, and freeze it again. */
export async function resume(options: ResumeOptions): Promise<TurnOutcome> {
  const started = await startResume(options);
  return continueRebuilt(await finishTurn(started.slug, options), options, options.forgeToken);
}

/**
 * Rehydrate a frozen bottle and start its agent on the same session with a new
 * prompt; return once it runs (`finishTurn` waits for the turn's end). On a
 * failure the bottle is frozen again, workspace and session intact.
 */
export async function startResume(options: ResumeOptions): Promise<StartedTurn> {
  const env = options.env ?? process.env;
  const meta = readMeta(options.slug, env);
  if (!meta)
    throw new BbError('NOT_FOUND', `no bottle ${options.slug} in ${homeLayout(env).bottles}`);
  if (meta.status !== 'frozen')
    throw new BbError(
      'CONFLICT',
      `bottle ${options.slug} is ${meta.status}; only a frozen bottle can be resumed`,
    );
  if (!meta.sessionId && !options.freshSession)
    throw new BbError('CONFLICT', `bottle ${options.slug} has no recorded session to resume`);
  if (meta.forge && !options.forgeToken)
    throw new BbError(
      'INVALID_INPUT',
      `bottle ${options.slug} talks to a forge: resume needs the forge token again`,
    );
  if (options.forgeToken) registerSecret(options.forgeToken);
  // Asked before anything of the bottle changes (its disk, its meta), not only before its agent.
  await options.fence?.();
  const { manifest: agent } = loadAgentManifest(meta.agent, env);
  const bottles = meta.bottles.map((b) => loadBottleManifest(b, env).manifest);
  const p = bottlePaths(meta.slug, env);
  migrateLayout(p);
  if (options.pr !== undefined && meta.forge) meta.forge.pr = options.pr;
  const here = await options.backend.identity?.();
  // Moved only between machines sharing a store (one engine renamed stays one engine).
  if (meta.engine && here && meta.engine !== here && homeLayout(env).shared)
    await moveHere(meta, options, env);
  if (here) meta.engine = here;
  if (options.freshSession) {
    meta.sessionId = null;
    meta.sessionStart = meta.turns.length + 1;
  }
  delete meta.syncPr;
  if (meta.warm) {
    // In the containers kept warm, when they can serve this turn; else cooled first.
    let warm: StartedTurn | string;
    try {
      warm = await resumeWarm(meta, agent, bottles, options, env);
    } catch (err) {
      // The turn was given to them and something failed: nothing of it is trusted.
      await freeze(meta.slug, options).catch(() => {});
      throw err;
    }
    if (typeof warm !== 'string') return warm;
    options.onProgress?.(`cooling warm bottle ${meta.slug}: ${warm}`);
    await freeze(meta.slug, options);
    meta.warm = null;
    delete meta.syncPr;
  }
  // Where the PR branch is on the forge, asked while the disk is mounted: when it is where
  // the checkout is (nobody pushed since), the turn need not wait for it to be brought over.
  const remote =
    syncsPr(meta) && meta.forge && options.forgeToken
      ? prBranchHead(meta, options, env)
      : undefined;
  await mountDisk(p);
  if (remote) {
    let here: string | undefined;
    try {
      here = readHeadAsData(p.workspace);
    } catch {
      // a HEAD it cannot read as data: the branch is brought over, as it always was
    }
    const there = await remote;
    meta.syncPr = !(there && here && there === here);
  }
  // This turn's sidecar brings what people pushed to the PR; nothing of an earlier turn's stays.
  clearPrBundle(p.sock);
  meta.status = 'running';
  writeMeta(meta, env);
  return startTurn({
    meta,
    agent,
    bottles,
    prompt: options.prompt,
    token: options.forgeToken,
    options,
    env,
  });
}

/**
 * A frozen bottle in a shared store, last run on another engine (a replica that
 * died, or a fleet that moved it): resumed here from its files. What held it
 * there is not here: containers kept warm there are not this engine's (their own
 * replica, or their engine's end, takes them), and its mirror is this machine's,
 * brought up to date first. Its workspace borrows the mirror's objects, so the
 * commit it started from must be there: a forge whose default branch was
 * rewritten since (a leaked secret pruned away) may have taken it, and then the
 * bottle cannot move, and says so.
 */
async function moveHere(
  meta: BottleMeta,
  options: ResumeOptions,
  env: Record<string, string | undefined>,
): Promise<void> {
  options.onProgress?.(
    `bottle ${meta.slug} last ran on ${meta.engine}: resuming it here from its files`,
  );
  meta.warm = null;
  if (!meta.forge || !options.forgeToken) return;
  const forge = { ...meta.forge, token: options.forgeToken };
  const { dir } = await syncMirror(forge, env, cloneTimeoutMs(env));
  meta.mirror = dir;
  const base = meta.baseCommit;
  if (!base) return;
  const have = await runGit([`--git-dir=${dir}`, 'cat-file', '-e', `${base}^{commit}`], {
    env: wallGitEnv({ config: [] }),
    timeoutMs: 30_000,
  }).then(
    () => true,
    () => false,
  );
  if (!have)
    throw new BbError(
      'CONFLICT',
      `bottle ${meta.slug} cannot move to this machine: its workspace started from commit ${base}, which the forge's ${meta.forge.owner}/${meta.forge.repo} no longer has (its default branch was rewritten). Resume it where it last ran, or close its PR to start afresh`,
    );
}

/**
 * Mount a frozen bottle's own disk so the host can read its workspace and home
 * (a frozen bottle keeps no mount); `unmountBottleDisk` when done. A bottle
 * without a disk of its own needs neither.
 */
export async function mountBottleDisk(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): Promise<void> {
  await mountDisk(bottlePaths(slug, env));
}

export async function unmountBottleDisk(
  slug: string,
  env: Record<string, string | undefined> = process.env,
): Promise<void> {
  const meta = readMeta(slug, env);
  // A running or warm bottle's containers hold it.
  if (meta?.status !== 'running' && !meta?.warm) await unmountDisk(bottlePaths(slug, env));
}

/**
 * Cool a warm bottle: its containers go and its disk is unmounted, as any
 * frozen bottle's (`freeze`). Nothing to do for one that is not warm. Returns
 * whether it was.
 */
export async function cool(slug: string, options: BottleOptions): Promise<boolean> {
  const meta = readMeta(slug, options.env ?? process.env);
  if (!meta?.warm || meta.status !== 'frozen') return false;
  await freeze(slug, options);
  return true;
}
