// The pods the Kubernetes backend plans really run: its runner launches a bottle on
// the fake API server, and a kubelet double runs the planned pods on Docker (real
// images, the real gate and bridge, the script agent). The agent reaches the forge
// only through its gate, over the gate's one TCP port; the gate writes its queue and
// op log on the claim the orchestrator reads; a resume continues the same session in
// new pods. What the double leaves out (scheduling, the pod network and its
// policies) is a cluster's; docs/guides/kubernetes.md says what is not proven.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubernetesBottles, kubeConfigFor, kubernetesRunner } from '@bb/backend-kubernetes';
import { FakeKubernetesApi, publishedSchemas } from '@bb/backend-kubernetes/testing';
import { giteaKind } from '@bb/forge';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend, prepareRuntime, readMeta, supervisedBottles } from '@bb/headless';
import { BbDatabase } from '@bb/state';
import { loadPolicy, SuperviseDesk, SuperviseStore } from '@bb/supervise';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
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
  until,
} from './support';

const docker = await probeDocker();
const SVC_KEY = 'svc-key-only-the-gate-holds-4242';

/** A service on loopback that says which key each request came with. */
async function keyedService() {
  const keys: string[] = [];
  const server = createServer((req, res) => {
    keys.push(String(req.headers['x-key'] ?? ''));
    res.end(`hello from the service, path ${req.url}\n`);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    keys,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
const TOKEN = 'bb-claude-token-pods-1001';
const NS = 'bots';
const AGENT_IMAGE = 'registry.example.test/bb-agents:1';
const GATE_IMAGE = 'registry.example.test/bb-gate:1';

describe.skipIf(!docker.ok)('the planned pods, run by a kubelet double on Docker', () => {
  let home: string;
  let claims: string;
  let api: FakeKubernetesApi;
  let gitea: GiteaTestServer;
  let kubelet: DockerKubelet;
  let svc: Awaited<ReturnType<typeof keyedService>>;
  const backend = new DockerBackend();
  const label = `bb.kubelet-test-${process.pid}`;

  beforeAll(async () => {
    svc = await keyedService();
    home = makeHome(
      'bb-k8s-pods-',
      {
        implementer: scriptAgent([
          prTurn({
            pr: {
              path: 'hello.txt',
              content: 'hello from a pod\n',
              message: 'Say hello',
              title: 'Say hello',
              body: 'From a pod.',
            },
            comment: 'Hello from a pod.',
            summary: 'Said hello.',
          }),
          rememberTurn('Remembered.'),
        ]),
      },
      {
        default: { image: AGENT_IMAGE, resources: { memory: '512m', cpus: 1 } },
        // A credential route to a service on this machine: the key is added by the gate.
        probe: {
          image: AGENT_IMAGE,
          credentials: [{ route: '/svc', upstream: svc.url, headers: { 'x-key': 'env:SVC_KEY' } }],
        },
      },
    );
    writeFileSync(
      join(home, 'config', 'agents', 'prober.json'),
      JSON.stringify({
        ...scriptAgent([
          {
            steps: [
              { do: 'sh', cmd: 'wget -q -O - http://127.0.0.1:3129/svc/hello' },
              { do: 'done', status: 'success', summary: 'Called the service.' },
            ],
          },
        ]),
        bottles: ['probe'],
      }),
    );
    claims = mkdtempSync(join(tmpdir(), 'bb-k8s-claims-'));
    api = await FakeKubernetesApi.start({ check: publishedSchemas, startDelayMs: null });
    gitea = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
    kubelet = new DockerKubelet({
      api,
      namespace: NS,
      backend,
      images: { [AGENT_IMAGE]: BASE_IMAGE, [GATE_IMAGE]: BASE_IMAGE },
      // The gate's image holds bot-bottle's runtime.
      imageFiles: {
        [GATE_IMAGE]: [{ source: prepareRuntime({ BB_HOME: home }), target: '/opt/bb/runtime' }],
      },
      // The orchestrator has the shared claim mounted at $BB_HOME/bottles.
      claim: (name) => (name === 'bb-bottle-state' ? join(home, 'bottles') : join(claims, name)),
      label,
    });
  }, 60_000);

  /** The runner the tests launch with, on the fake API server. */
  const runnerFor = (env: Record<string, string>) =>
    kubernetesRunner({
      bottles: new KubernetesBottles({ kubeConfig: kubeConfigFor(api.url), namespace: NS }),
      env,
      token: TOKEN,
      gateImage: GATE_IMAGE,
      stateClaim: 'bb-bottle-state',
      turnTimeoutMs: 60_000,
    });
  /** A fresh bottle of `agent` for issue `n`, launched on pods: its runner and slug. */
  const launchPod = async (
    env: Record<string, string>,
    agent: string,
    n: number,
    prompt: string,
  ) => {
    const runner = runnerFor(env);
    const slug = `${agent}-${Date.now().toString(36).slice(-5)}`;
    await runner.startLaunch({ agent, slug, prompt, forge: wiring(n) });
    return { runner, slug };
  };
  /** Issue `n` of acme/widgets, as the bottle's gate is wired to it. */
  const wiring = (n: number) => ({
    kind: 'gitea',
    site: giteaKind.fromEnv({ FORGE_GITEA_API: gitea.apiUrl }).env(),
    token: TOKEN,
    owner: 'acme',
    repo: 'widgets',
    issue: n,
    cloneUrl: gitea.cloneUrl('acme/widgets'),
  });

  afterAll(async () => {
    await kubelet?.close();
    for (const c of await backend.list({ [label]: '1' })) await backend.destroy(c.id);
    await gitea?.close();
    await api?.close();
    await svc?.close();
    rmSync(claims, { recursive: true, force: true });
    if (home) await removeHome(home);
  });

  it('runs a turn whose agent reaches the forge only through its gate, and resumes its session in new pods', async () => {
    onTestFailed(() => console.error('kubelet:', kubelet.errors.join('\n')));
    const env = { BB_HOME: home };
    const n = fileIssue(gitea, 'implementer', 'Say hello', 'From a pod, please.');
    const { runner, slug } = await launchPod(env, 'implementer', n, 'Say hello on the issue.');
    const first = await runner.finishTurn(slug);
    expect(kubelet.errors).toEqual([]);
    expect(first, first.output).toMatchObject({ exitCode: 0, ok: true });
    expect(first.sessionId).toBeTruthy();
    // The bot's comment, made by the gate (it alone holds the token).
    const comments = () => gitea.issue('acme/widgets', n).comments;
    expect(comments().map((c) => [c.author, c.body])).toContainEqual([
      'bb-claude',
      'Hello from a pod.',
    ]);
    // The workspace was cloned at launch (the gate's init container), and the agent's
    // commit reached the forge through the gate's push: a PR from the bottle's branch.
    const prs = (await (
      await fetch(`${gitea.apiUrl}/repos/acme/widgets/pulls?state=all`, {
        headers: { authorization: `token ${TOKEN}` },
      })
    ).json()) as Array<{
      number: number;
      head: { ref: string; sha: string };
      user: { login: string };
    }>;
    expect(prs.map((p) => [p.head.ref, p.user.login])).toEqual([
      [`bb/implementer-${n}`, 'bb-claude'],
    ]);
    const file = (await (
      await fetch(`${gitea.apiUrl}/repos/acme/widgets/contents/hello.txt?ref=${prs[0]!.head.sha}`, {
        headers: { authorization: `token ${TOKEN}` },
      })
    ).json()) as { content: string };
    expect(Buffer.from(file.content, 'base64').toString()).toBe('hello from a pod\n');
    // What the gate logged and relayed, on the claim the orchestrator reads.
    expect(await runner.storage.hasOperations(slug)).toBe(true);
    const relayed: string[] = [];
    await runner.storage.drainQueue(slug, (e) => {
      relayed.push(e.type === 'op' ? `op ${String(e.data['method'])}` : e.type);
    });
    expect(relayed).toContain('op post_comment');
    expect(relayed).toContain('done');
    // Frozen: its pods (and their containers) are gone, its claim kept.
    expect(api.objects('pods', NS)).toEqual([]);
    expect(readMeta(slug, env)).toMatchObject({ status: 'frozen', sessionId: first.sessionId });

    await runner.startResume({ slug, prompt: 'And now?' });
    const second = await runner.finishTurn(slug);
    expect(kubelet.errors).toEqual([]);
    expect(second, second.output).toMatchObject({ exitCode: 0, ok: true });
    expect(second.sessionId).toBe(first.sessionId);
    // The same conversation, from the home on its claim.
    expect(comments().at(-1)?.body).toBe('Turn 2: I remember "Say hello on the issue."');

    await runner.destroy(slug);
    expect(api.objects('persistentvolumeclaims', NS)).toEqual([]);
    expect(api.calls.filter((c) => /\/(exec|attach|portforward)$/.test(c.path))).toEqual([]);
  }, 180_000);

  it("gives the agent its credential routes through the gate's port, the key added by the gate alone", async () => {
    onTestFailed(() => console.error('kubelet:', kubelet.errors.join('\n')));
    const env = { BB_HOME: home, SVC_KEY };
    const n = gitea.createIssue('alice', 'acme/widgets', { title: 'Probe', body: 'x' });
    const { runner, slug } = await launchPod(env, 'prober', n, 'Call the service.');
    // The key is in the gate's Secret, nowhere in the agent's pod.
    const agentPod = (api.objects('pods', NS) as Array<{ metadata: { name: string } }>).find(
      (p) => p.metadata.name === `bb-${slug}-agent`,
    );
    expect(JSON.stringify(agentPod)).not.toContain(SVC_KEY);
    const outcome = await runner.finishTurn(slug);
    expect(kubelet.errors).toEqual([]);
    expect(outcome, outcome.output).toMatchObject({ exitCode: 0, ok: true });
    expect(outcome.output).toContain('hello from the service, path /hello');
    expect(svc.keys).toEqual([SVC_KEY]);
    await runner.destroy(slug);
  }, 180_000);

  it("lets an agent ask for a host: the gate's proxies reload in the same turn; a new image is refused when asked", async () => {
    onTestFailed(() => console.error('kubelet:', kubelet.errors.join('\n')));
    const seen: string[] = [];
    const target = createServer((req, res) => {
      seen.push(req.url ?? '');
      res.end('reached\n');
    });
    await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
    const host = `127.0.0.1:${(target.address() as AddressInfo).port}`;
    // Through its egress proxy by name: the double runs pods on the host's network, where
    // a cluster's policy would leave the agent no other way out.
    const viaProxy = 'http_proxy=http://127.0.0.1:3128 wget -q -O -';
    writeFileSync(
      join(home, 'config', 'bottles', 'guarded.json'),
      JSON.stringify({ image: AGENT_IMAGE, egress: { allow: ['registry.npmjs.org'] } }),
    );
    writeFileSync(
      join(home, 'config', 'agents', 'seeker.json'),
      JSON.stringify({
        ...scriptAgent([
          {
            steps: [
              // Refused: the host is not on its allowlist.
              { do: 'sh', cmd: `${viaProxy} http://${host}/before`, mayFail: true },
              {
                do: 'sh',
                cmd: `printf '{"allow":["registry.npmjs.org","${host}"]}\\n' > /tmp/allow.json && $BB_SUPERVISE pipelock-block --file /tmp/allow.json --why 'the tests call a service on ${host}' --wait 60`,
              },
              // The same turn, once approved.
              { do: 'sh', cmd: `${viaProxy} http://${host}/after` },
              // A new image cannot be made for a pod: refused at once, nobody asked.
              {
                do: 'sh',
                cmd: `printf 'FROM ${AGENT_IMAGE}\\nRUN true\\n' > /tmp/Dockerfile; if $BB_SUPERVISE capability-block --file /tmp/Dockerfile --why 'the tests need another tool' > /tmp/cap.txt 2>&1; then exit 1; fi; grep -q 'runs on Kubernetes, where its image is not rebuilt' /tmp/cap.txt`,
              },
              { do: 'done', status: 'success', summary: 'Reached the service.' },
            ],
          },
        ]),
        bottles: ['guarded'],
      }),
    );
    const env = { BB_HOME: home };
    const n = gitea.createIssue('alice', 'acme/widgets', { title: 'Seek', body: 'x' });
    const { runner, slug } = await launchPod(env, 'seeker', n, 'Reach the service.');
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    try {
      // The operator's desk, applying decisions the way the service does for pods.
      const desk = new SuperviseDesk({
        store: new SuperviseStore(db),
        bottles: supervisedBottles(env),
        policy: { ...loadPolicy(home), egressCeiling: [host] },
        remediator: runner.remediator,
      });
      const asked = await until(
        'the request',
        async () => (await desk.list({ status: 'pending' })).find((r) => r.slug === slug),
        90_000,
      );
      expect(asked.kind).toBe('allowlist');
      const out = await desk.approve(asked.id, { by: 'alice', via: 'cli' });
      expect(out.remediation, JSON.stringify(out.remediation)).toMatchObject({ ok: true });
      const outcome = await runner.finishTurn(slug);
      expect(kubelet.errors).toEqual([]);
      expect(outcome, outcome.output).toMatchObject({ exitCode: 0, ok: true });
      expect(seen).toEqual(['/after']);
      // The Dockerfile never reached the operator.
      expect((await desk.list({})).filter((r) => r.slug === slug).map((r) => r.kind)).toEqual([
        'allowlist',
      ]);
    } finally {
      db.close();
      target.close();
      await runner.destroy(slug);
    }
  }, 180_000);
});
