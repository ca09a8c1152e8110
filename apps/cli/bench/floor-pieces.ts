// The floors' pieces of the benchmarks that run the service: a sidecar already up, its
// op log on a host directory, and the same agent program in a bare container, as root's
// `docker run` gives it, with what the service makes ahead of need (network namespaces,
// loop-mounted disks) made beforehand too.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GATE_USER, HOME_LABEL, homeLabel } from '@bb/headless';
import { BASE_IMAGE } from '@bb/tooling/docker';
import { type ServeBench, TOKEN } from './serve-harness';

export interface BareDirs {
  root: string;
  sock: string;
  state: string;
  home: string;
  ws: string;
}

export function floorPieces(h: ServeBench) {
  const { run, env, home, server } = h;
  async function bareSidecar(
    repo: string,
    issue: number,
    sock: string,
    state: string,
    workspace: string,
  ) {
    return (
      await run('docker', [
        'run',
        '-d',
        '--network',
        'host',
        '--user',
        `${GATE_USER.uid}:${GATE_USER.gid}`,
        '--label',
        `${HOME_LABEL}=${homeLabel(env)}`,
        '-v',
        `${join(home, 'runtime')}:/opt/bb:ro`,
        '-v',
        `${sock}:/run/bb`,
        '-v',
        `${workspace}:/workspace:ro`,
        '-v',
        `${state}:/run/bb-state`,
        '-e',
        'HOME=/tmp',
        '-e',
        `FORGE_GITEA_API=${server.apiUrl}`,
        '-e',
        'FORGE_OWNER=acme',
        '-e',
        `FORGE_REPO=${repo}`,
        '-e',
        `FORGE_ISSUE_NUMBER=${issue}`,
        '-e',
        `FORGE_TOKEN=${TOKEN}`,
        '-e',
        'BB_SIDECAR_SOCKET=/run/bb/forge.sock',
        '-e',
        'BB_QUEUE_DIR=/tmp/q',
        '-e',
        'BB_OPS_LOG=/run/bb-state/ops.jsonl',
        '-e',
        'BB_WORKSPACE=/workspace',
        '-e',
        'BB_BRANCH=bb/bench',
        '-e',
        'BB_SOCKET_MODE=666',
        BASE_IMAGE,
        'node',
        '/opt/bb/sidecar.mjs',
      ])
    ).trim();
  }
  function bareDirs(): BareDirs {
    const root = mkdtempSync(join(tmpdir(), 'bb-bench-bare-'));
    for (const d of ['state', 'sock', 'home/.bb', 'ws'])
      mkdirSync(join(root, d), { recursive: true });
    writeFileSync(
      join(root, 'home', '.bb', 'script.json'),
      JSON.stringify({ turns: [{ steps: [{ do: 'read_issue' }] }] }),
    );
    return {
      root,
      sock: join(root, 'sock'),
      state: join(root, 'state'),
      home: join(root, 'home'),
      ws: join(root, 'ws'),
    };
  }
  /**
   * A bottle's kind of disk for `dir`: a sparse image beside it, ext4 as the service
   * formats it (what its disk pool holds); `mount` puts it at `dir`.
   */
  async function loopDisk(dir: string): Promise<{ mount: () => Promise<void> }> {
    const image = `${dir}.img`;
    await run('truncate', ['-s', '10G', image]);
    await run('mkfs.ext4', [
      '-q',
      '-F',
      '-m',
      '0',
      '-O',
      'mmp',
      '-E',
      'lazy_itable_init=1,lazy_journal_init=1',
      image,
    ]);
    return { mount: () => run('mount', ['-o', 'loop,nosuid,nodev', image, dir]).then(() => {}) };
  }
  async function own(d: BareDirs) {
    // As in a bottle: the agent's files are its user's, the gate's its own.
    await run('chown', ['-R', '1000:1000', d.home, d.ws]);
    await run('chown', ['-R', `${GATE_USER.uid}:${GATE_USER.gid}`, d.state, d.sock]);
  }
  /**
   * A network namespace made ahead of need, as the service keeps a pool of them: a
   * sleeping container with no network, whose namespace the bare agent joins.
   */
  const netnsHolder = async () =>
    (
      await run('docker', [
        'run',
        '-d',
        '--network',
        'none',
        '--label',
        `${HOME_LABEL}=${homeLabel(env)}`,
        BASE_IMAGE,
        'sleep',
        '3600',
      ])
    ).trim();
  /** `net`: the holder whose network namespace the agent joins; none, its own made at start. */
  const agentFlags = (d: BareDirs, net?: string) => [
    '--network',
    net ? `container:${net}` : 'none',
    '--user',
    '1000:1000',
    '--label',
    `${HOME_LABEL}=${homeLabel(env)}`,
    '-v',
    `${join(home, 'runtime')}:/opt/bb:ro`,
    '-v',
    `${d.sock}:/run/bb`,
    '-v',
    `${d.home}:/home/bottle`,
    '-v',
    `${d.ws}:/workspace`,
    '-e',
    'BB_SIDECAR_SOCKET=/run/bb/forge.sock',
    '-e',
    'BB_AGENT_HOME=/home/bottle',
  ];
  const AGENT_CMD = ['node', '/opt/bb/script-agent.mjs', '--prompt', 'go'];
  const agentArgs = (d: BareDirs, net?: string) => [
    ...agentFlags(d, net),
    BASE_IMAGE,
    ...AGENT_CMD,
  ];
  return { bareSidecar, bareDirs, loopDisk, own, netnsHolder, agentFlags, agentArgs, AGENT_CMD };
}
