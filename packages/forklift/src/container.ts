import { chownSync, lstatSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError, errorMessage } from '@bb/errors';
import {
  AGENT_USER,
  type Backend,
  GATE_USER,
  type MountRole,
  prepareRuntime,
  removeSecrets,
  startProxyGate,
} from '@bb/headless';
import { LABEL } from '@bb/names';
import { chownTreeNoFollow } from '@bb/wall';
import { type AgentChoice, agentRun, IN_CONTAINER } from './agent';
import { runBounded, watchDisk } from './disk';

const mib = (n: number) => Math.round(n / 1024 ** 2);

/**
 * The roles of a plan's agent mounts that forklift gives: its workspace, and
 * harness-state holding its home, its proxies' sockets and the runtime files it
 * needs (copied there). `currentConfig` is a bottle's view of its
 * configuration for supervise, which forklift has not: not given.
 */
const HARNESS_ROLES: ReadonlySet<MountRole> = new Set<MountRole>([
  'workspace',
  'home',
  'sockets',
  'runtime',
  'currentConfig',
]);

export interface AgentContainerOptions {
  backend: Backend;
  env: Record<string, string | undefined>;
  image: string;
  choice: AgentChoice;
  prompt: string;
  /** Secrets the credential proxy reads besides the host's environment (a derived bearer header). */
  secrets?: Record<string, string>;
  runDir: string;
  workspace: string;
  harness: string;
  /** Names the containers and labels them. */
  name: string;
  labels: Record<string, string>;
  timeoutMs: number;
  /** The most the agent may write to its workspace and home together; it is stopped past it. */
  diskBytes?: number | undefined;
  onProgress?: (line: string) => void;
}

export interface AgentOutcome {
  timedOut: boolean;
  /** Stopped for writing more than `diskBytes`. */
  overDisk: boolean;
  exitCode: number;
  /** What the agent's CLI said of its own run (not trusted for anything but the log). */
  ok: boolean;
  error?: string | undefined;
}

/**
 * Run the agent once: the proxy gate first when it has model access or an
 * egress allowlist (the gate holds the model key and serves two sockets in
 * harness-state/sock), then the agent's container with its two mounts
 * (/workspace, /harness-state), no network of its own, a read-only root, killed
 * by the host after `timeoutMs` whatever it does. Everything is removed after.
 */
export async function runAgentContainer(o: AgentContainerOptions): Promise<AgentOutcome> {
  const runtime = prepareRuntime(o.env);
  const run = agentRun(o.choice, o.prompt, runtime, { slug: o.name, image: o.image });
  const proxied = !!run.plan.gate;
  for (const m of run.plan.agent.mounts)
    if (!HARNESS_ROLES.has(m.role))
      throw new BbError(
        'INTERNAL',
        `forklift's agent plan mounts ${m.role}, which forklift does not give`,
      );
  for (const [rel, content] of Object.entries({ 'prompt.md': o.prompt, ...run.files })) {
    mkdirSync(join(o.harness, rel, '..'), { recursive: true, mode: 0o755 });
    writeFileSync(join(o.harness, rel), content, { mode: 0o755 });
  }
  const root = process.getuid?.() === 0;
  // Root hands everything the agent may write to the agent's user before it runs (nothing
  // of its yet to follow); anyone else runs the agent (and its proxies) as themselves,
  // since they can give nothing away: the files are theirs already.
  const user = root ? AGENT_USER : invokingUser();
  if (root) await chownTreeNoFollow(AGENT_USER, o.workspace, o.harness);
  else checkOwned(user, [o.workspace, o.harness]);
  const ids: string[] = [];
  try {
    if (proxied) {
      // The gate's: its sockets' directory (the agent may connect, not replace them while the
      // gate starts), its configuration and its logs, none of them the agent's.
      const sock = join(o.harness, 'sock');
      const proxy = join(o.runDir, 'proxy');
      const state = join(o.runDir, 'proxy-state');
      for (const d of [sock, proxy, state]) {
        mkdirSync(d, { recursive: true, mode: 0o755 });
        if (root) chownSync(d, GATE_USER.uid, GATE_USER.gid);
      }
      ids.push(
        await startProxyGate({
          backend: o.backend,
          env: { ...o.env, ...o.secrets },
          runtime,
          image: o.image,
          slug: o.name,
          labels: { ...o.labels, [LABEL.role]: 'forklift-proxy' },
          dirs: { proxy, sock, state },
          plan: run.plan,
          ...(root ? {} : { user }),
          ...(o.onProgress ? { onProgress: o.onProgress } : {}),
        }),
      );
    }
    const id = await o.backend.create({
      name: `${o.name}-agent`,
      image: o.image,
      cmd: run.cmd,
      env: run.env,
      user: `${user.uid}:${user.gid}`,
      workdir: IN_CONTAINER.workspace,
      labels: { ...o.labels, [LABEL.role]: 'forklift-agent' },
      network: 'none',
      readOnlyRootfs: true,
      tmpfs: { '/tmp': 'rw,size=1g' },
      // The plan's workspace, and its home, sockets and runtime, all in harness-state.
      mounts: [
        { source: o.workspace, target: IN_CONTAINER.workspace },
        { source: o.harness, target: IN_CONTAINER.harness },
      ],
      resources: run.plan.agent.limits,
    });
    ids.push(id);
    // The two mounts are the host's disk: what the agent writes there is measured as it
    // runs, and past the limit it is stopped (at most a second's writing over).
    const disk = watchDisk([o.workspace, o.harness], o.diskBytes, () => {
      o.onProgress?.(`the agent wrote more than ${mib(o.diskBytes ?? 0)} MiB: stopping it`);
      o.backend.stop(id, 0).catch(() => {});
    });
    const { exitCode, timedOut } = await runBounded(o.backend, id, o.timeoutMs);
    // Whatever it wrote between the last look and its exit counts too.
    const overDisk = disk.stop();
    const logs = await o.backend.logs(id).catch((e) => errorMessage(e));
    writeFileSync(join(o.runDir, 'agent.log'), logs);
    const said = run.parseResult(logs, exitCode);
    return { timedOut, overDisk, exitCode, ok: said.ok, error: said.error };
  } finally {
    for (const id of ids.reverse()) await o.backend.destroy(id).catch(() => {});
    // The gate's secrets directory (its key file went as soon as it served).
    if (proxied) removeSecrets(o.name, o.env);
  }
}

/** This process's uid and gid (forklift run by a user who is not root). */
export function invokingUser(): { uid: number; gid: number } {
  return { uid: process.getuid?.() ?? 1000, gid: process.getgid?.() ?? 1000 };
}

/**
 * The agent runs as `user`: what it must write has to be that user's, or the merge
 * fails for a reason no one would guess. Says which path and what to do instead.
 */
function checkOwned(user: { uid: number }, dirs: string[]): void {
  for (const d of dirs) {
    const st = lstatSync(d);
    if (st.uid !== user.uid)
      throw new BbError(
        'FORBIDDEN',
        `${d} belongs to uid ${st.uid}, but the agent runs as uid ${user.uid} (the user running forklift): run forklift as the owner of its state directory (XDG_STATE_HOME), or as root`,
      );
  }
}
