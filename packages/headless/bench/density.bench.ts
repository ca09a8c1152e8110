// How much memory bot-bottle itself holds per running bottle, at 20 bottles with
// proxies: the gate's processes (forge sidecar, supervise sidecar and proxies in one
// node process), the in-agent bridge (a bb-relay per port), the two containers' runtime
// shims and the gate cgroup's kernel memory, as proportional set size (PSS: pages
// shared between processes are split between them), and the holder of the network
// namespace its agent joined, when it did, with its shim. The agent's own processes
// are not counted. The floor, measured in the same run, is the same two-container
// layout holding nothing but an idle node process where the gate is and idle
// bb-relays where the bridge is: a separate-process gate and bridge cannot cost less.
// Goal (#43): <= 25 MB per bottle; bottles per GB reported.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createGiteaTestServer } from '@bb/forge/testing';
import { benchSize, reportBench } from '@bb/tooling/bench';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { destroy, startLaunch } from '../src/bottle/bottles';
import { NETNS_LABEL } from '../src/engine/backend';
import { DockerBackend } from '../src/engine/docker-backend';
import { giteaWiring, makeTestHome, scriptAgent } from '../src/test-home';

const docker = await probeDocker();
if (!docker.ok) {
  console.log(`density bench skipped: ${docker.reason}`);
  process.exit(0);
}
const N = Number(process.env['BB_DENSITY_BOTTLES'] ?? benchSize(20, 3));
const TOKEN = 'bench-density-token-7f3a';
const MODEL_KEY = 'bench-density-model-key-19c2';
const engine = new Docker();
const backend = new DockerBackend();
const server = await createGiteaTestServer({
  world: {
    users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
    orgs: [{ name: 'acme', members: ['alice'] }],
    repos: [{ owner: 'acme', name: 'widgets', collaborators: ['bot'] }],
    issues: Array.from({ length: N }, (_, i) => ({
      repo: 'acme/widgets',
      title: `Issue ${i + 1}`,
      author: 'alice',
    })),
  },
});
const home = makeTestHome('bb-bench-density-', {
  agents: { idle: scriptAgent([{ steps: [{ do: 'sleep', ms: 3_600_000 }] }], { name: 'B' }) },
  // With proxies: an allowlist and a credential route, as a real agent's bottle has.
  bottles: {
    default: {
      image: BASE_IMAGE,
      egress: { allow: ['registry.npmjs.org'] },
      credentials: [
        {
          route: '/anthropic',
          upstream: 'https://api.anthropic.com',
          headers: { 'x-api-key': 'env:BENCH_MODEL_KEY' },
        },
      ],
      resources: { memory: '256m', pids: 128 },
    },
  },
});
const env = { BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE, BENCH_MODEL_KEY: MODEL_KEY };
const floorIds: string[] = [];
const slugs: string[] = [];

/** PSS of a process in bytes (0 when it is gone). */
function pss(pid: number): number {
  try {
    const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}
const ppid = (pid: number) =>
  Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[1]);
const cmdline = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
};
/** A container's memory cgroup directory, from its first process (cgroup v1 or v2). */
function cgroupOf(pid: number): string {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  const v1 = lines.find((l) => /^\d+:memory:/.test(l));
  if (v1) return join('/sys/fs/cgroup/memory', v1.slice(v1.indexOf(':memory:') + 8));
  return join('/sys/fs/cgroup', lines.find((l) => l.startsWith('0::'))!.slice(3));
}
const procs = (cg: string) =>
  readFileSync(join(cg, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
/** The cgroup's kernel memory: `kernel` in v2's memory.stat, the kmem counter in v1. */
function kernelBytes(cg: string): number {
  try {
    return Number(readFileSync(join(cg, 'memory.kmem.usage_in_bytes'), 'utf8').trim());
  } catch {
    try {
      return Number(
        /^kernel (\d+)$/m.exec(readFileSync(join(cg, 'memory.stat'), 'utf8'))?.[1] ?? 0,
      );
    } catch {
      return 0;
    }
  }
}

interface Parts {
  gate: number;
  bridge: number;
  shims: number;
  kernel: number;
}
/**
 * What one bottle's containers cost: every process of the gate container, the
 * processes of the agent container matching `bridge`, both shims, the gate cgroup's
 * kernel memory.
 */
async function measure(gateId: string, agentId: string, bridge: RegExp): Promise<Parts> {
  const [g, a] = await Promise.all([
    engine.getContainer(gateId).inspect(),
    engine.getContainer(agentId).inspect(),
  ]);
  const gcg = cgroupOf(g.State.Pid);
  const acg = cgroupOf(a.State.Pid);
  // The holder of the network namespace the agent joined (made ahead of time), when it
  // did and it is still there (it goes once the agent runs).
  const holderId = a.Config.Labels?.[NETNS_LABEL];
  const h = holderId
    ? await engine
        .getContainer(holderId)
        .inspect()
        .catch(() => undefined)
    : undefined;
  const holder = h ? procs(cgroupOf(h.State.Pid)).reduce((s, p) => s + pss(p), 0) : 0;
  return {
    gate: procs(gcg).reduce((s, p) => s + pss(p), 0) + holder,
    bridge: procs(acg)
      .filter((p) => bridge.test(cmdline(p)))
      .reduce((s, p) => s + pss(p), 0),
    shims: pss(ppid(g.State.Pid)) + pss(ppid(a.State.Pid)) + (h ? pss(ppid(h.State.Pid)) : 0),
    kernel: kernelBytes(gcg),
  };
}
const total = (p: Parts) => p.gate + p.bridge + p.shims + p.kernel;
const mb = (b: number) => b / 1024 / 1024;
const sum = (xs: Parts[]): Parts =>
  xs.reduce(
    (s, x) => ({
      gate: s.gate + x.gate,
      bridge: s.bridge + x.bridge,
      shims: s.shims + x.shims,
      kernel: s.kernel + x.kernel,
    }),
    { gate: 0, bridge: 0, shims: 0, kernel: 0 },
  );

async function settle(): Promise<void> {
  // Start-up garbage collected and the processes idle, as a bottle between calls is.
  await new Promise((r) => setTimeout(r, 3000));
}

try {
  // Ours: N bottles launched as the orchestrator launches them.
  process.stderr.write(`launching ${N} bottles with proxies`);
  for (let i = 0; i < N; i++) {
    const started = await startLaunch({
      agent: 'idle',
      prompt: 'wait',
      slug: `density-${i}`,
      forge: giteaWiring(server, TOKEN, i + 1),
      backend,
      env,
    });
    slugs.push(started.slug);
    process.stderr.write('.');
  }
  process.stderr.write('\n');
  await settle();
  const ours: Parts[] = [];
  for (const slug of slugs) {
    const cs = await backend.list({ 'bb.slug': slug });
    const gate = cs.find((c) => c.labels['bb.role'] === 'gate')!;
    const agent = cs.find((c) => c.labels['bb.role'] === 'agent')!;
    if (cs.length !== 2 || !gate || !agent)
      throw new Error(`bottle ${slug} runs ${cs.length} containers, not its agent and its gate`);
    ours.push(await measure(gate.id, agent.id, /bb-bridge\.mjs|bb-relay/));
  }
  for (const slug of slugs) await destroy(slug, { backend, env });
  slugs.length = 0;

  // The floor: the same layout with idle node processes in bot-bottle's places (and
  // in the agent's, so node's pages are shared as they are among real bottles).
  const idle = 'setInterval(() => {}, 1 << 30)';
  const hardened = {
    Image: BASE_IMAGE,
    User: '1001:1001',
    Labels: { 'bb.bench': 'density-floor' },
    HostConfig: {
      ReadonlyRootfs: true,
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Memory: 256 * 1024 * 1024,
      PidsLimit: 128,
    },
  };
  const floor: Parts[] = [];
  for (let i = 0; i < N; i++) {
    const gate = await engine.createContainer({
      ...hardened,
      Cmd: ['node', '-e', idle],
      HostConfig: { ...hardened.HostConfig, NetworkMode: 'host' },
    });
    // The bridge's floor is ours: the same C relay, one per port, listening.
    const agent = await engine.createContainer({
      ...hardened,
      Cmd: [
        'sh',
        '-c',
        `/opt/bb/bb-relay 3128 /tmp/e.sock & /opt/bb/bb-relay 3129 /tmp/c.sock & exec node -e '${idle}'`,
      ],
      HostConfig: {
        ...hardened.HostConfig,
        NetworkMode: 'none',
        Binds: [`${join(home, 'runtime')}:/opt/bb:ro`],
      },
    });
    floorIds.push(gate.id, agent.id);
    await gate.start();
    await agent.start();
  }
  await settle();
  for (let i = 0; i < N; i++)
    floor.push(await measure(floorIds[2 * i]!, floorIds[2 * i + 1]!, /bb-relay/));

  const o = sum(ours);
  const f = sum(floor);
  const per = mb(total(o)) / N;
  const floorPer = mb(total(f)) / N;
  const row = (name: string, p: Parts) =>
    `${name.padEnd(6)} gate ${(mb(p.gate) / N).toFixed(1)}  bridge ${(mb(p.bridge) / N).toFixed(1)}  shims ${(mb(p.shims) / N).toFixed(1)}  kernel ${(mb(p.kernel) / N).toFixed(1)}  = ${(mb(total(p)) / N).toFixed(1)} MB per bottle`;
  console.log(row('ours', o));
  console.log(row('floor', f));
  reportBench({
    name: 'density',
    metric: `bot-bottle's own memory per running bottle with proxies, MB (PSS of gate, bridge, shims + gate cgroup kernel), ${N} bottles, vs idle node processes in the gate's and the agent's places and idle bb-relays in the bridge's`,
    ours: per,
    baseline: floorPer,
    // #43's goal (it was 50 MB before).
    goal: 25,
    higherIsBetter: false,
    target: '<= 25 MB per bottle',
    pass: per <= 25,
    extra: {
      bottles: N,
      bottlesPerGB: Math.floor(1024 / per),
      floorBottlesPerGB: Math.floor(1024 / floorPer),
      gateMB: mb(o.gate) / N,
      bridgeMB: mb(o.bridge) / N,
      shimsMB: mb(o.shims) / N,
      kernelMB: mb(o.kernel) / N,
    },
  });
} finally {
  for (const slug of slugs) await destroy(slug, { backend, env }).catch(() => {});
  for (const id of floorIds)
    await engine
      .getContainer(id)
      .remove({ force: true })
      .catch(() => {});
  await server.close();
  rmSync(home, { recursive: true, force: true });
}
