/**
 * A bottle's turn as data: which containers it has and what each runs, with
 * what variables, files, mounts (by role), secrets (by reference) and limits.
 * `planBottle` is pure: it reads no file and no secret. The Docker bottles
 * (`turns.ts`, `gate.ts`), the Kubernetes runner and forklift each map a plan
 * onto what they make; none of them derives a variable, a file or a limit of
 * its own.
 */

import { HOLD_FILE } from '@bb/forge-sidecar';
import { type AgentProvider, modelApiFor } from '../providers';
import { type BottleMeta, BRIDGE_PORTS, type IN_BOTTLE } from './layout';
import { type AgentManifest, type BottleManifest, memoryBytes } from './manifests';
import { PR_BUNDLE } from './pr-sync';
import type { BottleConfig } from './supervise-gate';

/** Where each part of a bottle is, as its processes see it. */
export type InsidePaths = Omit<typeof IN_BOTTLE, 'socket'> & {
  /** The forge surface's socket; absent: the agent has none (forklift's). */
  socket?: string | undefined;
};

/** What a mount carries: each backend says where that is (a host path, a claim's folder). */
export type MountRole =
  | 'runtime'
  | 'sockets'
  | 'workspace'
  | 'home'
  | 'currentConfig'
  | 'mirror'
  | 'turns'
  | 'secrets'
  | 'queue'
  | 'state'
  | 'supervise'
  | 'proxy';

export interface PlannedMount {
  role: MountRole;
  target: string;
  readOnly: boolean;
}

export interface PlannedLimits {
  memoryBytes: number;
  pidsLimit: number;
  /** Absent: the backend's default. */
  cpus?: number | undefined;
}

/** A secret the gate reads from its secrets' folder, by what it is: never its value. */
export type SecretRef =
  | { from: 'forge-token' }
  /** The `env:`/`file:` values a routes file names (`routeSecrets`), as JSON. */
  | { from: 'route-keys'; routes: string };

export interface AgentPlan {
  image: string;
  /** The provider's command for the turn: each backend runs it its own way (a prelude, a bridge). */
  cmd: string[];
  env: Record<string, string>;
  /** Written into the agent's home before it starts (a CLI's settings, the script agent's script). */
  files: Record<string, string>;
  workdir: string;
  mounts: PlannedMount[];
  limits: PlannedLimits;
}

export interface GatePlanned {
  cmd: string[];
  env: Record<string, string>;
  mounts: PlannedMount[];
  limits: PlannedLimits;
  /** The sockets it serves, by file name in the sockets' folder. */
  sockets: string[];
  /** It alone reaches the forge and the model: the host's network, or none. */
  network: 'host' | 'none';
  /** The sidecars it runs. */
  serves: { forge: boolean; supervise: boolean; proxies: boolean };
}

export interface BottlePlan {
  slug: string;
  turn: number;
  agent: AgentPlan;
  /** Absent: the bottle has no forge, no supervise and no proxies, so no gate. */
  gate?: GatePlanned | undefined;
  /** The gate's secrets' folder: file name → what it holds. */
  secrets: Record<string, SecretRef>;
  /** Files of the `proxy` role (the allowlist, the routes), when the proxies run. */
  proxyFiles?: { 'rules.json': string; 'routes.json': string } | undefined;
  /** The configuration the turn runs with (the manifests', with the operator's approvals). */
  config: BottleConfig;
}

/** What the supervise sidecar enforces, as its gate is told (`BB_SUPERVISE_POLICY`). */
export interface SupervisePolicyPlan {
  allowedBases: string[];
  ttlMs: number;
  waitMs: number;
  coolDownAfter: number;
  coolDownMs: number;
  /** Kinds the platform cannot apply, with why: refused at request time. */
  refused?: Partial<Record<'routes' | 'allowlist' | 'dockerfile', string>>;
}

/** What a plan reads of a bottle's meta. */
export type PlannedBottle = Pick<
  BottleMeta,
  | 'slug'
  | 'image'
  | 'sessionId'
  | 'forge'
  | 'turns'
  | 'branch'
  | 'diskBytes'
  | 'baseCommit'
  | 'syncPr'
  | 'holdId'
>;

export interface PlanInput {
  meta: PlannedBottle;
  agent: Pick<AgentManifest, 'model' | 'retries' | 'script' | 'promptOverlay'>;
  provider: AgentProvider;
  bottles: Array<Pick<BottleManifest, 'env' | 'resources'>>;
  prompt: string;
  config: BottleConfig;
  inside: InsidePaths;
  /** The gate holds the forge token this turn (a forge bottle). */
  forgeToken: boolean;
  /** The supervise sidecar runs, with this policy. */
  supervise?: SupervisePolicyPlan | undefined;
  /** The agent is another user than the gate: it may connect to the gate's sockets. */
  sharedSockets: boolean;
  /**
   * The backend isolates the agent, so its proxies are its only way out (a supervised
   * bottle then runs them with nothing allowed yet). @default true
   */
  isolated?: boolean;
  /** The repository mirror's objects are mounted at `inside.mirror`. */
  mirror: boolean;
  /** A warm bottle's turns' commands are mounted at `inside.turns`. */
  turns?: boolean;
}

/** The agent's proxy variables: every outbound request through the bridge to the egress proxy. */
export const PROXY_ENV: Readonly<Record<string, string>> = {
  HTTPS_PROXY: `http://127.0.0.1:${BRIDGE_PORTS.egress}`,
  HTTP_PROXY: `http://127.0.0.1:${BRIDGE_PORTS.egress}`,
  NO_PROXY: '127.0.0.1,localhost',
};

/** The model API as the agent reaches it: the bridge to the credential proxy's route. */
export const modelApiUrl = (kind: 'anthropic' | 'openai'): string =>
  `http://127.0.0.1:${BRIDGE_PORTS.credentials}/${kind}`;

/** The turn file in the gate's state folder, where the host writes the turn it serves. */
export const TURN_FILE = 'turn';

const parseRoutes = (routes: string) =>
  (JSON.parse(routes) as { routes: Array<{ prefix: string }> }).routes;

/** Whether a configuration needs the egress and credential proxies. */
export function needsProxies(cfg: Pick<BottleConfig, 'routes' | 'allowlist'>): boolean {
  const allow = (JSON.parse(cfg.allowlist) as { allow: unknown[] }).allow;
  return parseRoutes(cfg.routes).length > 0 || allow.length > 0;
}

/** Whether this turn's sidecar brings the PR branch to the checkout (a resumed turn with a PR). */
export function syncsPr(meta: Pick<BottleMeta, 'forge' | 'turns' | 'syncPr'>): boolean {
  return (
    !!meta.forge && meta.forge.pr !== undefined && meta.turns.length > 0 && meta.syncPr !== false
  );
}

/**
 * The forge sidecar's variables in a bottle's gate, with the gate's own paths:
 * the one description of them. No secret: the token is named by its file.
 */
export function forgeSidecarEnv(
  meta: PlannedBottle,
  forge: NonNullable<BottleMeta['forge']>,
  P: Pick<InsidePaths, 'secrets' | 'queue' | 'state' | 'workspace'> & { socket: string },
): Record<string, string> {
  return {
    // The kind's own variables (FORGE_<KIND>_…, checked by the caller): none stands for one set here.
    ...forge.site,
    // Node's own HTTP client: one gate per bottle, and undici's pool would add about 20 MB to each.
    BB_FORGE_HTTP_CLIENT: 'node',
    FORGE_KIND: forge.kind,
    FORGE_OWNER: forge.owner,
    FORGE_REPO: forge.repo,
    FORGE_ISSUE_NUMBER: String(forge.issue),
    FORGE_PR_NUMBER: forge.pr ? String(forge.pr) : '',
    // The file, never the token: nothing the engine shows holds it.
    FORGE_TOKEN_FILE: `${P.secrets}/token`,
    BB_SIDECAR_SOCKET: P.socket,
    BB_QUEUE_DIR: P.queue,
    BB_OPS_LOG: `${P.state}/ops.jsonl`,
    BB_GIT_DIR: `${P.state}/push.git`,
    // It holds what the agent pushes: no more than its own disk could.
    BB_GIT_DIR_MAX: String(meta.diskBytes ?? 16 * 1024 ** 3),
    BB_WORKSPACE: P.workspace,
    BB_BRANCH: meta.branch,
    // A resumed turn with a PR: the sidecar brings the PR branch to the checkout.
    ...(syncsPr(meta) ? { BB_SYNC_PR: '1' } : {}),
    // The launch's base: its history is the mirror's, never taken from the workspace.
    ...(meta.baseCommit ? { BB_BASE_COMMIT: meta.baseCommit } : {}),
    // The turn it serves, as the host writes it (a warm gate serves several).
    BB_TURN_FILE: `${P.state}/${TURN_FILE}`,
    // Fenced: it writes only while the host renews its hold for this id.
    ...(meta.holdId ? { BB_HOLD_FILE: `${P.state}/${HOLD_FILE}`, BB_HOLD_ID: meta.holdId } : {}),
  };
}

/** The proxies' variables in a gate: their configuration, the keys' file, their sockets and logs. */
export function proxyGateEnv(
  P: Pick<InsidePaths, 'proxy' | 'secrets' | 'socketDir' | 'state'>,
): Record<string, string> {
  return {
    BB_EGRESS_RULES: `${P.proxy}/rules.json`,
    BB_CRED_ROUTES: `${P.proxy}/routes.json`,
    BB_CRED_SECRETS_FILE: `${P.secrets}/keys.json`,
    BB_EGRESS_SOCKET: `${P.socketDir}/egress.sock`,
    BB_CRED_SOCKET: `${P.socketDir}/cred.sock`,
    BB_EGRESS_LOG: `${P.state}/egress.jsonl`,
    BB_PROXY_STATUS: `${P.state}/proxy-status.json`,
  };
}

const MIB = 1024 * 1024;

/** The runtime's bash start-up file of a supervised bottle (`COMMAND_NOT_FOUND_HINT`). */
export const HINTS_FILE = 'bb-hints.sh';

/**
 * A turn's prompt with the agent manifest's `promptOverlay` after it: every turn
 * of every provider hears it (a resumed session as much as a new one).
 */
export function withOverlay(prompt: string, overlay: string | undefined): string {
  const extra = overlay?.trim();
  return extra ? `${prompt}\n\n${extra}` : prompt;
}

/** The plan of one turn of a bottle. Pure: the caller reads the configuration and the policy. */
export function planBottle(i: PlanInput): BottlePlan {
  const { meta, inside: P, config } = i;
  const turn = meta.turns.length + 1;
  const forge = meta.forge && i.forgeToken ? meta.forge : undefined;
  const supervise = i.supervise;
  // A supervised bottle runs its proxies even with nothing to allow yet (they refuse
  // everything, saying which tool asks): an approved host or route then applies in the
  // same turn, by reloading them, whatever its manifest named. Not where nothing is
  // isolated (the local backend): there the agent is not held, and its bridge would
  // take the host's own ports.
  const proxies = needsProxies(config) || (!!supervise && i.isolated !== false);
  const routes = parseRoutes(config.routes);
  // The first model API the provider speaks that the bottle's credential routes offer.
  const modelApi = modelApiFor(i.provider, (kind) =>
    routes.some((r) => r.prefix === `/${kind}`) ? modelApiUrl(kind) : undefined,
  );
  const invocation = i.provider.invocation({
    prompt: withOverlay(i.prompt, i.agent.promptOverlay),
    sessionId: meta.sessionId ?? undefined,
    model: i.agent.model,
    home: P.home,
    runtimeDir: P.runtime,
    ...(P.socket ? { socket: P.socket } : {}),
    ...(supervise ? { superviseSocket: P.superviseSocket } : {}),
    ...(modelApi ? { modelApi } : {}),
    ...(i.agent.retries !== undefined ? { retries: i.agent.retries } : {}),
  });
  const first = i.bottles[0]?.resources ?? {};
  const agent: AgentPlan = {
    image: meta.image,
    cmd: invocation.cmd,
    env: {
      ...Object.assign({}, ...i.bottles.map((b) => b.env)),
      ...invocation.env,
      HOME: P.home,
      ...(P.socket ? { BB_SIDECAR_SOCKET: P.socket } : {}),
      // The supervise tools as a command, for any agent's shell (MCP agents also have them as tools).
      ...(supervise
        ? {
            BB_SUPERVISE_SOCKET: P.superviseSocket,
            BB_SUPERVISE: `node ${P.runtime}/bb-supervise.mjs`,
            // bash says which tool asks for a command that is not there.
            BASH_ENV: `${P.runtime}/${HINTS_FILE}`,
          }
        : {}),
      BB_WORKSPACE_DIR: P.workspace,
      ...(syncsPr(meta)
        ? { BB_PR_BUNDLE: `${P.socketDir}/${PR_BUNDLE}`, BB_PR_BRANCH: meta.branch }
        : {}),
      ...(proxies ? PROXY_ENV : {}),
    },
    // The script agent's script is written each turn, like a real CLI's settings,
    // so a script edited between turns takes effect.
    files: {
      ...invocation.files,
      ...(i.agent.script !== undefined
        ? { '.bb/script.json': JSON.stringify(i.agent.script) }
        : {}),
    },
    workdir: P.workspace,
    mounts: [
      { role: 'runtime', target: P.runtime, readOnly: true },
      { role: 'sockets', target: P.socketDir, readOnly: false },
      { role: 'workspace', target: P.workspace, readOnly: false },
      { role: 'home', target: P.home, readOnly: false },
      // Read only: the agent proposes changes to these files, it never writes them.
      { role: 'currentConfig', target: P.currentConfig, readOnly: true },
      // The repository's history, borrowed by the checkout: nobody's to change.
      ...(i.mirror ? [{ role: 'mirror' as const, target: P.mirror, readOnly: true }] : []),
      // The turns' commands, the host's.
      ...(i.turns ? [{ role: 'turns' as const, target: P.turns, readOnly: true }] : []),
    ],
    limits: {
      memoryBytes: memoryBytes(first.memory) ?? 2 * 1024 ** 3,
      pidsLimit: first.pids ?? 512,
      ...(first.cpus ? { cpus: first.cpus } : {}),
    },
  };
  const secrets: Record<string, SecretRef> = {};
  if (forge) secrets['token'] = { from: 'forge-token' };
  // The gate alone holds the credentials: the `env:NAME` values its routes name.
  if (proxies) secrets['keys.json'] = { from: 'route-keys', routes: config.routes };
  const plan: BottlePlan = {
    slug: meta.slug,
    turn,
    agent,
    secrets,
    config,
    ...(proxies
      ? { proxyFiles: { 'rules.json': config.allowlist, 'routes.json': config.routes } }
      : {}),
  };
  if (!forge && !supervise && !proxies) return plan;
  const socketFile = P.socket ?? `${P.socketDir}/forge.sock`;
  const env: Record<string, string> = {
    HOME: '/tmp',
    BB_SLUG: meta.slug,
    // The agent is another user: it may connect, not remove.
    BB_SOCKET_MODE: i.sharedSockets ? '666' : '600',
    ...(forge ? forgeSidecarEnv(meta, forge, { ...P, socket: socketFile }) : {}),
    ...(supervise
      ? {
          BB_SUPERVISE_SOCKET: P.superviseSocket,
          BB_SUPERVISE_DIR: P.supervise,
          BB_CURRENT_CONFIG: P.currentConfig,
          BB_SUPERVISE_POLICY: JSON.stringify(supervise),
        }
      : {}),
    ...(proxies ? proxyGateEnv(P) : {}),
  };
  const mounts: PlannedMount[] = [
    { role: 'runtime', target: P.runtime, readOnly: true },
    { role: 'sockets', target: P.socketDir, readOnly: false },
    ...(Object.keys(secrets).length > 0
      ? [{ role: 'secrets' as const, target: P.secrets, readOnly: true }]
      : []),
  ];
  if (forge)
    mounts.push(
      { role: 'queue', target: P.queue, readOnly: false },
      // Read only: the sidecar reads the agent's commits as data and never writes there.
      { role: 'workspace', target: P.workspace, readOnly: true },
      ...(i.mirror ? [{ role: 'mirror' as const, target: P.mirror, readOnly: true }] : []),
    );
  if (forge || proxies) mounts.push({ role: 'state', target: P.state, readOnly: false });
  if (supervise)
    mounts.push(
      { role: 'supervise', target: P.supervise, readOnly: false },
      { role: 'currentConfig', target: P.currentConfig, readOnly: true },
    );
  if (proxies) mounts.push({ role: 'proxy', target: P.proxy, readOnly: true });
  plan.gate = {
    cmd: ['node', `${P.runtime}/bb-gate.mjs`],
    env,
    mounts,
    // Its git checks every object the agent pushes, its proxies carry the agent's traffic:
    // whatever that costs, it costs here.
    limits: { memoryBytes: ((forge ? 1024 : 128) + (proxies ? 256 : 0)) * MIB, pidsLimit: 256 },
    sockets: [
      ...(forge ? ['forge.sock'] : []),
      ...(supervise ? ['supervise.sock'] : []),
      ...(proxies ? ['egress.sock', 'cred.sock'] : []),
    ],
    network: forge || proxies ? 'host' : 'none',
    serves: { forge: !!forge, supervise: !!supervise, proxies },
  };
  return plan;
}
