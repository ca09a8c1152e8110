// The images the Kubernetes deployment runs, as scripts/build-k8s-images.sh builds them
// from this checkout: the orchestrator's image runs `bb doctor --backend kubernetes`
// against the fake API server, and the gate's image runs its network probe in a pod
// (the kubelet double runs pods on Docker). The double enforces no network policy, so
// a reachable target must be reported as reached (doctor fails, as it would on a
// cluster whose CNI ignores policies) and a closed one as blocked. The Role of
// deploy/rbac.yaml and Pod Security "restricted" are the fake's.
import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  deployedRoleRules,
  FakeKubernetesApi,
  publishedSchemas,
} from '@bb/backend-kubernetes/testing';
import { DockerBackend } from '@bb/headless';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DockerKubelet } from './docker-kubelet';
import { makeHome, removeHome } from './support';

const run = promisify(execFile);
const docker = await probeDocker();
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const NS = 'bot-bottle-bottles';
const GATE = 'registry.example.test/bot-bottle/gate:1';
const AGENTS = 'registry.example.test/bb-agents:1';
type Check = { check: string; ok: boolean | null; detail: string };

describe.skipIf(!docker.ok)('the Kubernetes images, built from this checkout', () => {
  let api: FakeKubernetesApi;
  let kubelet: DockerKubelet;
  let home: string;
  let open: Server;
  const backend = new DockerBackend();
  const label = `bb.k8s-images-test-${process.pid}`;

  beforeAll(async () => {
    await run('sh', [join(root, 'scripts/build-k8s-images.sh')], {
      cwd: root,
      env: { ...process.env, BB_K8S_IMAGE_PREFIX: 'bot-bottle' },
    });
    api = await FakeKubernetesApi.start({
      check: publishedSchemas,
      startDelayMs: null,
      access: { [NS]: deployedRoleRules() },
      podSecurity: { [NS]: 'restricted' },
    });
    kubelet = new DockerKubelet({
      api,
      namespace: NS,
      backend,
      // The gate's image is the one built; the agents' any image with node.
      images: { [GATE]: 'bot-bottle/gate:latest', [AGENTS]: BASE_IMAGE },
      claim: () => '/nonexistent',
      label,
    });
    // A bottle manifest naming the agents' image: doctor runs it too.
    home = makeHome('bb-k8s-images-', {}, { default: { image: AGENTS } });
    mkdirSync(join(home, 'state'), { recursive: true });
    // The image runs as the gates' user (1001), as deploy/orchestrator.yaml has it.
    await run('chown', ['-R', '1001:1001', home]);
    open = createServer((s) => s.end());
    await new Promise<void>((r) => open.listen(0, '127.0.0.1', r));
  }, 300_000);

  afterAll(async () => {
    await kubelet?.close();
    for (const c of await backend.list({ [label]: '1' })) await backend.destroy(c.id);
    await api?.close();
    open?.close();
    if (home) removeHome(home);
  });

  /** `bb doctor --backend kubernetes --json` in the orchestrator's image, on this host's network. */
  const doctor = async (target: string) => {
    const env = {
      BB_HOME: '/bb',
      BB_K8S_API: api.url,
      BB_K8S_GATE_IMAGE: GATE,
      BB_K8S_STATE_CLAIM: 'bb-bottle-state',
      BB_K8S_PROBE_TARGET: target,
    };
    const args = ['run', '--rm', '--network', 'host', '-v', `${home}:/bb`];
    for (const [k, v] of Object.entries(env)) args.push('-e', `${k}=${v}`);
    args.push(
      'bot-bottle/orchestrator:latest',
      'bb',
      'doctor',
      '--backend',
      'kubernetes',
      '--json',
    );
    const out = await run('docker', args, { timeout: 60_000 }).then(
      (r) => ({ code: 0, stdout: r.stdout }),
      (e: { code?: number; stdout?: string; stderr?: string }) => ({
        code: e.code ?? -1,
        stdout: e.stdout ?? '',
        stderr: e.stderr,
      }),
    );
    if (!out.stdout.trim().startsWith('['))
      throw new Error(
        `bb doctor printed no checks (exit ${out.code}): ${'stderr' in out ? out.stderr : ''}; kubelet: ${kubelet.errors.join('; ')}`,
      );
    const checks = JSON.parse(out.stdout) as Check[];
    return { code: out.code, checks: Object.fromEntries(checks.map((c) => [c.check, c])) };
  };

  it('runs doctor from the orchestrator image; the gate image probes the network; a reachable target fails it', async () => {
    const { address, port } = open.address() as { address: string; port: number };
    const reached = await doctor(`${address}:${port}`);
    expect(reached.checks['kubernetes backend']).toMatchObject({ ok: true });
    expect(reached.checks['kubernetes access']).toMatchObject({ ok: true });
    expect(reached.checks['pod security']).toMatchObject({ ok: true });
    expect(reached.checks['gate image']).toMatchObject({
      ok: true,
      detail: expect.stringContaining('holds the runtime at /opt/bb/runtime'),
    });
    expect(reached.checks[`agent image ${AGENTS}`]).toMatchObject({ ok: true });
    expect(reached.checks['network policy']).toMatchObject({
      ok: false,
      detail: expect.stringContaining(`reached ${address}:${port}`),
    });
    expect(reached.code).toBe(1);
    expect(kubelet.errors).toEqual([]);
  }, 240_000);

  it('reports a target the probe cannot reach as blocked, and leaves no probe pod', async () => {
    const closed = await freePort();
    const blocked = await doctor(`127.0.0.1:${closed}`);
    expect(blocked.checks['network policy']).toMatchObject({
      ok: true,
      detail: expect.stringContaining(`127.0.0.1:${closed}`),
    });
    expect(api.objects('pods', NS)).toEqual([]);
  }, 240_000);
});
