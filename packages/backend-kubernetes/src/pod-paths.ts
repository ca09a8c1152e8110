import type { InsidePaths, MountRole } from '@bb/headless';
import { RUNTIME_DIR } from './manifests';

/** Where things are inside a bottle's pods (manifests.ts mounts them there). */
export const IN_POD = {
  home: '/home/agent',
  workspace: '/workspace',
  /** bot-bottle's runtime, from the gate's image. */
  runtime: RUNTIME_DIR,
  /** The forge surface's socket: the gate's own, and the agent's bridge to it (each its /tmp). */
  socket: '/tmp/bb/forge.sock',
  /** Where the gate reads its Secret's files. */
  secrets: '/run/bb-secrets',
  /** The gate's queue and state: its folders of the shared claim. */
  queue: '/queue',
  state: '/state',
} as const;

/** The same places as the plan names them (the proxies' files are in the gate's Secret). */
export const IN_POD_PLAN: InsidePaths = {
  home: IN_POD.home,
  workspace: IN_POD.workspace,
  runtime: IN_POD.runtime,
  socket: IN_POD.socket,
  socketDir: '/tmp',
  secrets: IN_POD.secrets,
  queue: IN_POD.queue,
  state: IN_POD.state,
  // The proxies' files (secret references only) on the claim, where a reload rewrites them.
  proxy: '/proxy',
  superviseSocket: '/tmp/bb/supervise.sock',
  supervise: '/supervise',
  currentConfig: '/etc/bot-bottle/current-config',
  mirror: '',
  turns: '',
};

/**
 * What the pods give a plan's mounts (manifests.ts): the runtime, the home and
 * workspace on the bottle's claim, the sockets (the bridge's and the gate's own),
 * the gate's Secret (its keys), and on the shared claim its queue, state, the
 * proxies' files, the supervise exchange and the bottle's current configuration.
 * The agent's pod has nothing of the shared claim: it reads its current
 * configuration from the supervise sidecar (`$BB_SUPERVISE config`).
 */
export const POD_ROLES: Record<'agent' | 'gate', ReadonlySet<MountRole>> = {
  // The agent's pod: nothing of the gate's (its Secret, queue, state) is ever in it.
  agent: new Set<MountRole>(['runtime', 'home', 'workspace', 'sockets', 'currentConfig']),
  gate: new Set<MountRole>([
    'runtime',
    'workspace',
    'sockets',
    'secrets',
    'proxy',
    'queue',
    'state',
    'supervise',
    'currentConfig',
  ]),
};
