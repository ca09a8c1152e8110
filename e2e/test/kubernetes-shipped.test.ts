// Kubernetes as shipped: the images scripts/build-k8s-images.sh builds from this
// checkout, and deploy/orchestrator.yaml's Deployment run as a pod would run them.
// - The orchestrator's image runs `bb doctor --backend kubernetes` against the fake API
//   server, and the gate's image runs its network probe in a pod (the kubelet double
//   runs pods on Docker). The double enforces no network policy, so a reachable target
//   must be reported as reached (doctor fails, as it would on a cluster whose CNI
//   ignores policies) and a closed one as inconclusive (a host answered; a policy drops).
// - The Deployment's container (its image, command, user, read-only root, environment
//   and volumes, as a kubelet would give them; the API server's address is the one
//   setting added, where a cluster gives a service account) runs the whole service
//   loop: a Gitea webhook launches a bottle whose pods, from the gate's image, run the
//   script agent; it opens a PR and comments through its gate; the turn is recorded
//   and frozen; a comment resumes the same session in new pods; closing the PR deletes
//   every object.
// The Role of deploy/rbac.yaml and Pod Security "restricted" are the fake's.
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  deployedObjects,
  deployedRoleRules,
  FakeKubernetesApi,
  publishedSchemas,
} from '@bb/backend-kubernetes/testing';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend } from '@bb/headless';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { DockerKubelet } from './docker-kubelet';
import {
  fileIssue,
  forgeWorld,
  makeHome,
  prTurn,
  rememberTurn,
  removeHome,
  scriptAgent,
  serviceBottle,
  until,
} from './support';

const run = promisify(execFile);
const docker = await probeDocker();
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const NS = 'bot-bottle-bottles';
const GATE = 'registry.example.test/bot-bottle/gate:1';
const AGENTS = 'registry.example.test/bb-agents:1';
const TOKEN = 'bb-claude-token-shipped-7070';
const SECRET = 'k8s-shipped-webhook-secret';
const deployment = deployedObjects('orchestrator.yaml').find((d) => d.kind === 'Deployment')!
  .spec as {
  template: {
    spec: {
      securityContext: { runAsUser: number; runAsGroup: number };
      containers: Array<{
        image: string;
        command: string[];
        env: Array<{ name: string; value: string }>;
        securityContext?: { readOnlyRootFilesystem?: boolean };
        volumeMounts: Array<{ name: string; mountPath: string; readOnly?: boolean }>;
      }>;
      volumes: Array<{
        name: string;
        emptyDir?: object;
        configMap?: { items: Array<{ key: string; path: string }> };
        secret?: { items: Array<{ key: string; path: string }> };
        persistentVolumeClaim?: { claimName: string };
      }>;
    };
  };
};
type Check = { check: string; ok: boolean | null; detail: string };

describe.skipIf(!docker.ok)('the Kubernetes images, built from this checkout', () => {
  let api: FakeKubernetesApi;
  let kubelet: DockerKubelet;
  let home: string;
  let open: Server;
  let gitea: GiteaTestServer;
  const claims = mkdtempSync(join(tmpdir(), 'bb-k8s-shipped-claims-'));
  const claimDir = join(claims, 'bb-bottle-state');
  const orchestrator = `bb-k8s-shipped-orchestrator-${process.pid}`;
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
      // The shared state claim is the orchestrator pod's bottles volume; a bottle's own
      // claim a folder of its own.
      claim: (name) => (name === 'bb-bottle-state' ? claimDir : join(claims, name)),
      label,
    });
    // A bottle manifest naming the agents' image: doctor runs it too.
    home = makeHome('bb-k8s-images-', {}, { default: { image: AGENTS } });
    mkdirSync(join(home, 'state'), { recursive: true });
    // The image runs as the gates' user (1001), as deploy/orchestrator.yaml has it.
    await run('chown', ['-R', '1001:1001', home]);
    open = createServer((s) => s.end());
    await new Promise<void>((r) => open.listen(0, '127.0.0.1', r));
    gitea = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
  }, 300_000);

  afterAll(async () => {
    await run('docker', ['rm', '-f', orchestrator]).catch(() => {});
    await kubelet?.close();
    for (const c of await backend.list({ [label]: '1' })) await backend.destroy(c.id);
    await api?.close();
    await gitea?.close();
    open?.close();
    if (home) removeHome(home);
    rmSync(claims, { recursive: true, force: true });
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

  it('calls a target that refuses the connection inconclusive (a host answered), and leaves no probe pod', async () => {
    const closed = await freePort();
    const refused = await doctor(`127.0.0.1:${closed}`);
    expect(refused.checks['network policy']).toMatchObject({
      ok: null,
      detail: expect.stringContaining(
        `127.0.0.1:${closed} was answered (ECONNREFUSED), not dropped`,
      ),
    });
    expect(api.objects('pods', NS)).toEqual([]);
  }, 240_000);
  it("runs the service loop in deploy/orchestrator.yaml's container: webhook, launch, turn, resume, destroy", async () => {
    onTestFailed(async () => {
      console.error('kubelet:', kubelet.errors.join('\n'));
      console.error(
        'orchestrator:',
        (await run('docker', ['logs', orchestrator]).catch((e) => e)).stderr,
      );
    });
    const pod = deployment.template.spec;
    const c = pod.containers[0]!;
    const { runAsUser: uid, runAsGroup: gid } = pod.securityContext;
    const dirs = mkdtempSync(join(tmpdir(), 'bb-k8s-shipped-pod-'));
    // Each volume as a kubelet gives it: the ConfigMap's and the Secret's items as files
    // (this test's agent and bottle under the names deploy/ ships), the claim shared
    // with the gates, the rest empty.
    const content: Record<string, string> = {
      'claude.agent.json': JSON.stringify(
        scriptAgent([
          prTurn({
            pr: {
              path: 'shipped.txt',
              content: 'shipped\n',
              message: 'Ship it',
              title: 'Ship it',
              body: 'From the shipped deployment.',
            },
            comment: 'Hello from the shipped deployment.',
            summary: 'Shipped.',
          }),
          rememberTurn('Remembered.'),
        ]),
      ),
      'default.bottle.json': JSON.stringify({
        image: AGENTS,
        resources: { memory: '512m', cpus: 1 },
      }),
      'provenance-ed25519.pem': generateKeyPairSync('ed25519')
        .privateKey.export({ type: 'pkcs8', format: 'pem' })
        .toString(),
    };
    const source: Record<string, string> = {};
    for (const v of pod.volumes) {
      if (v.persistentVolumeClaim) {
        expect(v.persistentVolumeClaim.claimName).toBe('bb-bottle-state');
        mkdirSync(claimDir, { recursive: true });
        source[v.name] = claimDir;
        continue;
      }
      const dir = join(dirs, v.name);
      mkdirSync(dir, { recursive: true });
      for (const item of (v.configMap ?? v.secret)?.items ?? []) {
        expect(content[item.key], `the test gives ${item.key}`).toBeDefined();
        mkdirSync(dirname(join(dir, item.path)), { recursive: true });
        writeFileSync(join(dir, item.path), content[item.key]!, { mode: v.secret ? 0o400 : 0o644 });
      }
      source[v.name] = dir;
    }
    await run('chown', ['-R', `${uid}:${gid}`, dirs, claimDir]);
    const port = await freePort();
    const env: Record<string, string> = {
      ...Object.fromEntries(c.env.map((e) => [e.name, e.value])),
      // This host's loopback, where the Gitea double hooks it.
      BB_HOST: '127.0.0.1',
      BB_PORT: String(port),
      // The Secret bb-orchestrator-env.
      FORGE_GITEA_API: gitea.apiUrl,
      FORGE_TOKEN: TOKEN,
      FORGE_WEBHOOK_SECRET: SECRET,
      // Where a cluster gives the pod its service account and the API server's address.
      BB_K8S_API: api.url,
    };
    const args = [
      'run',
      '-d',
      '--name',
      orchestrator,
      '--network',
      'host',
      '--user',
      `${uid}:${gid}`,
    ];
    if (c.securityContext?.readOnlyRootFilesystem) args.push('--read-only');
    for (const m of c.volumeMounts)
      args.push('-v', `${source[m.name]}:${m.mountPath}${m.readOnly ? ':ro' : ''}`);
    for (const [k, v] of Object.entries(env)) args.push('-e', `${k}=${v}`);
    args.push(c.image, ...c.command);
    await run('docker', args);
    const url = `http://127.0.0.1:${port}`;
    await until(
      'the orchestrator answers',
      async () => (await fetch(`${url}/healthz`).catch(() => undefined))?.ok === true,
      60_000,
    );
    gitea.addHook({ url: `${url}/webhooks/gitea`, secret: SECRET });
    const row = (n: number) => serviceBottle(url, n);

    const n = fileIssue(gitea, 'claude', 'Ship it', 'From the deployment, please.');
    await until(
      'the first turn recorded and frozen',
      async () => (await row(n))?.status === 'frozen',
      120_000,
    );
    const first = (await row(n))!;
    expect(kubelet.errors).toEqual([]);
    const comments = () => gitea.issue('acme/widgets', n).comments;
    expect(comments().map((x) => [x.author, x.body])).toContainEqual([
      'bb-claude',
      'Hello from the shipped deployment.',
    ]);
    expect(first.prNumber).toBeGreaterThan(0);
    expect(first.sessionId).toBeTruthy();
    const slug = first.slug;
    const of = (plural: string) =>
      api.objects(plural, NS).filter((o) => o.metadata.labels?.['bb.slug'] === slug);
    expect(of('pods')).toEqual([]);
    expect(of('persistentvolumeclaims')).toHaveLength(1);

    gitea.comment('alice', 'acme/widgets', first.prNumber!, 'And now?');
    // The same conversation: the agent remembers the first turn's prompt (the issue's).
    await until(
      'the resumed turn',
      () => /^Turn 2: I remember ".*Ship it/s.test(comments().at(-1)?.body ?? ''),
      120_000,
    );
    await until('frozen again', async () => (await row(n))?.status === 'frozen', 60_000);
    expect((await row(n))!.sessionId).toBe(first.sessionId);

    gitea.setState('alice', 'acme/widgets', first.prNumber!, 'closed');
    await until('destroyed', async () => (await row(n))?.status === 'destroyed', 60_000);
    for (const plural of [
      'pods',
      'secrets',
      'services',
      'persistentvolumeclaims',
      'networkpolicies',
    ])
      expect(of(plural), plural).toEqual([]);
    expect(api.calls.filter((x) => /\/(exec|attach|portforward)$/.test(x.path))).toEqual([]);
    rmSync(dirs, { recursive: true, force: true });
  }, 420_000);
});
