import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, isBbError, redactString } from '@bb/errors';
import { checkBottleBranch, checkSiteEnv, forgeKinds } from '@bb/forge';
import {
  atomicWrite,
  type BottleInfo,
  type BottleManifest,
  type BottleMeta,
  type BottleRunner,
  BRIDGE_PORTS,
  bottlePaths,
  bottleRemediator,
  effectiveConfig,
  endedTurn,
  GATE_USER,
  type GateTokens,
  gateToken,
  HOME_LABEL,
  homeLabel,
  hostBottleStorage,
  loadAgentManifest,
  loadBottleManifest,
  MANAGED_LABEL,
  memoryBytes,
  planBottle,
  providerFor,
  readMeta,
  routeSecrets,
  secretValue,
  supervises,
  type TurnOutcome,
  validSessionId,
  writeCurrentConfig,
  writeMeta,
  writeTurnFile,
} from '@bb/headless';
import { bbHome, LABEL } from '@bb/names';
import { loadPolicy } from '@bb/supervise';
import type { KubeBottleStatus, KubernetesBottles } from './kubernetes-bottles';
import type { KubeBottleSpec } from './manifests';
import { IN_POD, IN_POD_PLAN, POD_ROLES } from './pod-paths';

/** Why a Kubernetes bottle's agent is refused a new image when it asks. */
export const NO_REBUILD_ON_KUBERNETES =
  'this bottle runs on Kubernetes, where its image is not rebuilt: say in your summary what the image lacks (the operator gives the bottle an image that has it, built and pushed, for its next turn) and carry on without it';

/** How often a pod's gate looks for a reload of its proxies' files. */
const PROXY_WATCH_MS = 250;

export interface KubernetesRunnerOptions {
  bottles: KubernetesBottles;
  /** Where BB_HOME (the bottles' state, the manifests) is read from. */
  env: Record<string, string | undefined>;
  /**
   * The forge token (the gate's Secret, never the agent's): the bot's, or `credentials`
   * make each turn's gate its own. Such a token is made at the turn's start and not
   * renewed in the pod: it must outlast the turn (a GitHub App's lasts an hour, as long
   * as a turn may run by default).
   */
  token?: string | undefined;
  credentials?: GateTokens['credentials'];
  /** The gate's image: bot-bottle's runtime and its sidecars. */
  gateImage: string;
  /**
   * The ReadWriteMany claim this orchestrator has mounted at `$BB_HOME/bottles`:
   * each gate writes its queue and op log in its bottle's folder of it, where the
   * orchestrator reads them (`hostBottleStorage`).
   */
  stateClaim: string;
  /** Labels every object of a bottle carries, besides bot-bottle's own. */
  labels?: Record<string, string>;
  /** How long one turn's agent may run before it is stopped. @default 1 h */
  turnTimeoutMs?: number;
  /** The most a bottle's push repository may hold on the shared claim. @default 2 GiB */
  pushRepoBytes?: number;
}

const DEFAULT_AGENT_MEMORY = 2 * 1024 ** 3;
const DEFAULT_AGENT_CPUS = 2;
const DEFAULT_PUSH_REPO_BYTES = 2 * 1024 ** 3;

/**
 * The orchestrator's bottles on Kubernetes, through the same seam as the
 * Docker ones (`BottleRunner`): a launch makes the bottle's group of objects
 * and starts its agent pod with the turn's command; a turn's end is the agent
 * pod's, and freezing deletes the pods and keeps the claim; a resume starts
 * them again on the claim with the same agent session; destroy deletes all.
 * The bottle's meta, the orchestrator's notes and what its gate writes (queue,
 * op log) live under `$BB_HOME/bottles/<slug>`, on a claim the orchestrator
 * and the gates share, and are read through `hostBottleStorage`.
 */
export function kubernetesRunner(
  o: KubernetesRunnerOptions,
): BottleRunner & { readonly isolates: true } {
  const { env, bottles } = o;
  // The claim the orchestrator reads the gates' queues and op logs on. A gate's
  // socket is in its own pod, never there: whether it serves is its readiness, which
  // `containers` reports (a gate that stops is `exited`), so no socket is looked for.
  const { gateListening: _never, ...storage } = hostBottleStorage(env);
  const labels = { ...o.labels, ...MANAGED_LABEL, [HOME_LABEL]: homeLabel(env) };
  const manifests = (agent: string, names?: string[]) => {
    const a = loadAgentManifest(agent, env).manifest;
    const list = names ?? a.bottles;
    const bottleManifests = list.map((n) => loadBottleManifest(n, env).manifest);
    return { agent: a, bottles: list, bottle: bottleManifests[0]!, bottleManifests };
  };
  const imageOf = (b: BottleManifest, name: string) => {
    if (!b.image)
      throw new BbError(
        'INVALID_INPUT',
        `bottle ${name} gives a dockerfile: on Kubernetes a bottle needs an image the cluster can pull (build and push it, then name it as image)`,
      );
    return b.image;
  };

  /** The objects of the bottle's turn: the agent runs the provider's command for `prompt`. */
  const specOf = (
    meta: BottleMeta,
    prompt: string,
    token: string | undefined,
    launch = false,
  ): KubeBottleSpec => {
    // This turn's key to its gate's port: in the gate's Secret and the agent's bridge,
    // so no other pod's connection is served even where policies are not enforced.
    const linkKey = randomBytes(24).toString('hex');
    const m = manifests(meta.agent, meta.bottles);
    const policy = supervises(env) ? loadPolicy(bbHome(env)) : undefined;
    // The bottles' egress allowlist and credential routes (with what an operator
    // approved for the whole bottle in their place), as a Docker bottle's.
    const plan = planBottle({
      meta,
      agent: m.agent,
      provider: providerFor(m.agent.provider),
      bottles: m.bottleManifests,
      prompt,
      config: effectiveConfig(meta, m.bottleManifests, env),
      inside: IN_POD_PLAN,
      forgeToken: true,
      // The supervise sidecar in the gate: proxies reload there; an image is not rebuilt.
      supervise: policy
        ? {
            allowedBases: [meta.image],
            ttlMs: policy.ttlMs,
            waitMs: policy.waitMs,
            coolDownAfter: policy.coolDownAfter,
            coolDownMs: policy.coolDownMs,
            refused: { dockerfile: NO_REBUILD_ON_KUBERNETES },
          }
        : undefined,
      sharedSockets: false,
      mirror: false,
    });
    // What the gate reads on the shared claim, written by the orchestrator before its pod
    // starts: the proxies' files (secret references only) and the bottle's current
    // configuration the supervise sidecar shows and proposals start from.
    const p = bottlePaths(meta.slug, env);
    if (plan.proxyFiles) {
      // The orchestrator's alone (the gate only reads it), each file written whole.
      mkdirSync(p.proxy, { recursive: true, mode: 0o755 });
      chmodSync(p.proxy, 0o755);
      for (const [f, text] of Object.entries(plan.proxyFiles)) atomicWrite(join(p.proxy, f), text);
      // A reload's generation starts afresh each turn.
      rmSync(join(p.proxy, 'generation'), { force: true });
    }
    if (policy) {
      gateDir(p.supervise);
      writeCurrentConfig(meta.slug, plan.config, env);
    }
    const gate = plan.gate;
    if (!gate)
      throw new BbError(
        'INVALID_INPUT',
        `bottle ${meta.slug} has no forge and no proxies: on Kubernetes a bottle's agent reaches the world only through its gate`,
      );
    for (const [pod, mounts] of [
      ['agent', plan.agent.mounts],
      ['gate', gate.mounts],
    ] as const)
      for (const mount of mounts)
        if (!POD_ROLES[pod].has(mount.role))
          throw new BbError(
            'INTERNAL',
            `a bottle's plan mounts ${mount.role} in its ${pod}, which a Kubernetes bottle's ${pod} pod does not give`,
          );
    const forge = meta.forge;
    // What reaches the token's holder is checked here too, whoever wrote the meta.
    if (forge) checkSiteEnv(forge.kind, forge.site);
    const proxies = !!plan.proxyFiles;
    return {
      slug: meta.slug,
      labels: { ...labels, ...meta.labels },
      agent: {
        image: plan.agent.image,
        // The bridge gives the agent its gate's forge surface as a local socket (the gate is
        // another pod, at BB_GATE), then runs the turn's command and ends with it.
        command: [
          'node',
          `${IN_POD.runtime}/bb-bridge.mjs`,
          `${IN_POD.socket}=gate:forge`,
          // The proxies, where the agent's tools look for them (as in a Docker bottle).
          ...(proxies
            ? [`${BRIDGE_PORTS.egress}=gate:egress`, `${BRIDGE_PORTS.credentials}=gate:credentials`]
            : []),
          ...(policy ? [`${IN_POD_PLAN.superviseSocket}=gate:supervise`] : []),
          '--',
          ...plan.agent.cmd,
        ],
        env: {
          ...plan.agent.env,
          BB_SLUG: meta.slug,
          BB_GATE_KEY: linkKey,
          // The turn's files in its home (a CLI's settings, the script agent's script),
          // written by the bridge as the agent before the command: nothing outside the
          // pod can write its claim.
          BB_HOME_FILES: JSON.stringify(plan.agent.files),
        },
        // Processes: the kubelet's podPidsLimit, which a cluster sets for every pod.
        resources: {
          memoryBytes: plan.agent.limits.memoryBytes,
          cpus: plan.agent.limits.cpus ?? DEFAULT_AGENT_CPUS,
        },
      },
      gate: {
        image: o.gateImage,
        command: gate.cmd,
        // A launch's gate clones the workspace first (a resume finds it on the claim).
        ...(launch && forge ? { clone: m.agent.git } : {}),
        env: {
          ...gate.env,
          // Its push repository is on the claim every gate shares: bounded well below it.
          ...(forge ? { BB_GIT_DIR_MAX: String(o.pushRepoBytes ?? DEFAULT_PUSH_REPO_BYTES) } : {}),
          BB_GATE_KEY_FILE: `${IN_POD.secrets}/link-key`,
          // Nobody signals a pod: its gate watches the generation a reload writes.
          ...(proxies ? { BB_PROXY_WATCH_MS: String(PROXY_WATCH_MS) } : {}),
        },
        resources: { memoryBytes: gate.limits.memoryBytes, cpus: 1 },
      },
      // The gate's Secret: what the plan's references name, resolved here (by the orchestrator).
      secrets: {
        ...Object.fromEntries(
          Object.entries(plan.secrets).map(([name, ref]) => [
            name,
            secretValue(ref, token, (routes) => routeSecrets(routes, env)),
          ]),
        ),
        'link-key': linkKey,
      },
      stateClaim: o.stateClaim,
      shared: { proxy: proxies, supervise: !!policy },
      ...(meta.diskBytes ? { storageBytes: meta.diskBytes } : {}),
    };
  };

  /** A folder of the bottle's on the shared claim the gate's user reads or writes. */
  const gateDir = (d: string) => {
    mkdirSync(d, { recursive: true, mode: 0o770 });
    if (process.getuid?.() === 0) chownSync(d, GATE_USER.uid, GATE_USER.gid);
  };

  const startTurn = (meta: BottleMeta, prompt: string) => {
    const turn = meta.turns.length + 1;
    meta.status = 'running';
    meta.current = { turn, prompt, startedAt: new Date().toISOString() };
    writeMeta(meta, env);
    // The turn the gate serves, as the host says it (the op log is kept per turn).
    writeTurnFile(bottlePaths(meta.slug, env), turn);
  };

  const containers = (s: KubeBottleStatus): BottleInfo[] => {
    const info = (role: string, phase: string, exitCode?: number): BottleInfo => ({
      id: `bb-${s.slug}-${role}`,
      name: `bb-${s.slug}-${role}`,
      image: '',
      state:
        phase === 'Running'
          ? 'running'
          : phase === 'Succeeded' || phase === 'Failed'
            ? 'exited'
            : 'created',
      exitCode: exitCode ?? null,
      oomKilled: false,
      labels: { ...labels, [LABEL.slug]: s.slug, [LABEL.role]: role },
      isolation: {
        network: 'policy',
        capDrop: ['ALL'],
        noNewPrivileges: true,
        readOnlyRootfs: true,
        user: role === 'agent' ? '1000:1000' : '1001:1001',
        pidsLimit: null,
        memoryBytes: null,
      },
    });
    return [
      ...(s.gate ? [info('gate', s.gate)] : []),
      ...(s.agent ? [info('agent', s.agent, s.exitCode)] : []),
    ];
  };

  return {
    backendName: 'kubernetes',
    isolates: true,
    // Its gates serve the supervise sidecar (unless BB_SUPERVISE=off); proxies reload in
    // place (the gate watches its files); an image is refused when asked for.
    supervise: supervises(env),
    remediator: bottleRemediator({ env, gateWatches: true }),
    storage,

    async startLaunch(l) {
      const m = manifests(l.agent, l.bottles);
      const image = imageOf(m.bottle, m.bottles[0]!);
      if (readMeta(l.slug, env))
        throw new BbError('CONFLICT', `bottle ${l.slug} exists already: destroy it first`);
      // The bottle's folder of the shared claim: meta and notes on top (no gate mounts
      // that), the gate's own queue and state below, the gate user's (root or that user
      // can make them so: deploy/orchestrator.yaml runs as it).
      const uid = process.getuid?.();
      if (uid !== undefined && uid !== 0 && uid !== GATE_USER.uid)
        throw new BbError(
          'UNAUTHORIZED',
          `the orchestrator runs as uid ${uid}: run it as the gates' user (${GATE_USER.uid}) or as root, so it can read what they write on the shared claim`,
        );
      const p = bottlePaths(l.slug, env);
      mkdirSync(p.dir, { recursive: true, mode: 0o700 });
      gateDir(p.queue);
      gateDir(p.state);
      const { token: _token, ...forge } = l.forge;
      const meta: BottleMeta = {
        slug: l.slug,
        agent: l.agent,
        bottles: m.bottles,
        backend: 'kubernetes',
        image,
        status: 'running',
        sessionId: null,
        cwd: IN_POD.workspace,
        // A resumed turn works on the checkout its claim kept: the gate's PR bundle would
        // be in the gate's pod, out of the agent's reach.
        syncPr: false,
        // The forge kind's bottle branch convention, as in a Docker bottle.
        branch: checkBottleBranch(forgeKinds.get(l.forge.kind), l.agent, l.forge.issue),
        forge,
        turns: [],
        createdAt: new Date().toISOString(),
      };
      const { token } = await gateToken(o, l.forge, l.forge.token);
      // Nothing is made in the cluster unless the issue is still the caller's.
      await l.fence?.().catch((err: unknown) => rmThen(p.dir, err));
      startTurn(meta, l.prompt);
      await bottles.launch(specOf(meta, l.prompt, token, true));
    },

    async startResume(r) {
      const meta = readMeta(r.slug, env);
      if (!meta) throw new BbError('NOT_FOUND', `no bottle ${r.slug}`);
      if (meta.status !== 'frozen')
        throw new BbError(
          'CONFLICT',
          `bottle ${r.slug} is ${meta.status}; only a frozen bottle can be resumed`,
        );
      if (r.freshSession) {
        meta.sessionId = null;
        meta.sessionStart = meta.turns.length + 1;
      }
      if (r.pr !== undefined && meta.forge) meta.forge = { ...meta.forge, pr: r.pr };
      const token = meta.forge ? (await gateToken(o, meta.forge)).token : undefined;
      await r.fence?.();
      startTurn(meta, r.prompt);
      await bottles.resume(specOf(meta, r.prompt, token));
    },

    async finishTurn(slug) {
      const meta = readMeta(slug, env);
      if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug}`);
      let exitCode: number;
      let vanished = false;
      try {
        exitCode = await bottles.waitForAgent(slug, o.turnTimeoutMs ?? 3_600_000);
      } catch (err) {
        // Stopped (its pod deleted) or gone: the turn is over, its end unknown.
        if (!isBbError(err, 'NOT_FOUND')) throw err;
        exitCode = 137;
        vanished = true;
      }
      const output = redactString(await bottles.agentLogs(slug).catch(() => ''));
      const provider = providerFor(manifests(meta.agent, meta.bottles).agent.provider);
      const parsed = provider.parseResult(output, exitCode);
      await bottles.freeze(slug);
      const current = meta.current ?? {
        turn: meta.turns.length + 1,
        prompt: '',
        startedAt: new Date().toISOString(),
      };
      meta.sessionId = validSessionId(parsed.sessionId) ?? meta.sessionId;
      meta.turns.push(endedTurn(current, exitCode, parsed));
      meta.status = 'frozen';
      meta.current = null;
      writeMeta(meta, env);
      return {
        slug,
        exitCode,
        ok: parsed.ok,
        sessionId: meta.sessionId ?? undefined,
        ...(parsed.error ? { error: parsed.error } : {}),
        output,
        ...(vanished ? { vanished } : {}),
        ...(parsed.tokens !== undefined ? { tokens: parsed.tokens } : {}),
        provider: provider.name,
      } satisfies TurnOutcome;
    },

    stopAgent: (slug, timeoutMs) => bottles.stopAgent(slug, timeoutMs),

    async destroy(slug) {
      await bottles.destroy(slug);
      rmSync(bottlePaths(slug, env).dir, { recursive: true, force: true });
    },

    containers: async (slug) => containers(await bottles.status(slug)),
    ours: async () => (await bottles.list(labels)).flatMap(containers),

    memoryOf(agent, names) {
      try {
        const mem = manifests(agent, names).bottle.resources.memory;
        return memoryBytes(mem) ?? DEFAULT_AGENT_MEMORY;
      } catch {
        return DEFAULT_AGENT_MEMORY;
      }
    },
    sessionLimits(agent) {
      try {
        return loadAgentManifest(agent, env).manifest.session ?? {};
      } catch {
        return {};
      }
    },
  };
}

/** Remove what a launch made of `dir`, then fail with `err`. */
function rmThen(dir: string, err: unknown): never {
  rmSync(dir, { recursive: true, force: true });
  throw err;
}
