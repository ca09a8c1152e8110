// The service with BB_BACKEND=kubernetes, against an in-process fake API server
// (no cluster can run here): a Gitea webhook launches the bottle as a group of
// objects; what its gate relays (read through the bottle storage) is taken in; the
// agent pod's end ends the turn, which is recorded and frozen (pods gone, claim
// kept); a comment resumes it in new pods with the same session; closing the PR
// deletes every object. The test plays the parts a cluster would run: the gate
// (it writes the queue and op log where the shared claim is mounted) and the
// kubelet (it ends the agent pod with the CLI's output).
import { execFileSync } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ApiCall, FakeKubernetesApi, publishedSchemas } from '@bb/backend-kubernetes/testing';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { QueueWriter } from '@bb/forge-sidecar';
import { bottlePaths } from '@bb/headless';
import type { RunningOrchestrator } from '@bb/service';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import {
  fileIssue,
  forgeWorld,
  makeHome,
  removeHome,
  scriptAgent,
  serveFor,
  until,
} from './support';

const TOKEN = 'bb-claude-token-k8s-6443';
const SECRET = 'k8s-webhook-secret';
const NS = 'bots';
const AGENT_IMAGE = 'registry.example.test/bb-agents:1';
const GATE_IMAGE = 'registry.example.test/bb-gate:1';

type Obj = {
  metadata: { name: string; labels?: Record<string, string> };
  spec?: Record<string, unknown>;
  stringData?: Record<string, string>;
};
type Container = { command: string[]; env?: Array<{ name: string; value: string }> };

describe('the service on the kubernetes backend (fake API server)', () => {
  let home: string;
  let api: FakeKubernetesApi;
  let gitea: GiteaTestServer;
  let orch: RunningOrchestrator;
  const logs: Array<Record<string, unknown>> = [];
  const calls: ApiCall[] = [];

  beforeAll(async () => {
    home = makeHome(
      'bb-k8s-',
      { implementer: scriptAgent([{ steps: [{ do: 'done', status: 'success', summary: 'x' }] }]) },
      { default: { image: AGENT_IMAGE, resources: { memory: '1g', cpus: 1 } } },
    );
    api = await FakeKubernetesApi.start({ check: publishedSchemas });
    gitea = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
    orch = await serveFor({
      home,
      gitea,
      token: TOKEN,
      secret: SECRET,
      env: {
        BB_WARM_WINDOW: '0',
        BB_BACKEND: 'kubernetes',
        BB_K8S_API: api.url,
        BB_K8S_NAMESPACE: NS,
        BB_K8S_GATE_IMAGE: GATE_IMAGE,
        BB_K8S_STATE_CLAIM: 'bb-bottle-state',
      },
      logStream: {
        write: (line: string) => {
          logs.push(JSON.parse(line) as Record<string, unknown>);
          return true;
        },
      } as unknown as NodeJS.WritableStream,
    });
  }, 60_000);

  afterAll(async () => {
    await orch?.close();
    await gitea?.close();
    await api?.close();
    if (home) await removeHome(home);
  });

  const of = (plural: string, slug: string) =>
    (api.objects(plural, NS) as Obj[]).filter((o) => o.metadata.labels?.['bb.slug'] === slug);
  const pod = (slug: string, role: 'agent' | 'gate') =>
    of('pods', slug).find((p) => p.metadata.labels?.['bb.role'] === role);
  const main = (p: Obj | undefined) => (p?.spec?.['containers'] as Container[] | undefined)?.[0];
  const envOf = (c: Container | undefined) =>
    Object.fromEntries((c?.env ?? []).map((e) => [e.name, e.value]));
  const row = async (issue: number) => {
    const get = async (path: string) =>
      (
        (await (await fetch(`${orch.url}${path}`)).json()) as {
          bottles: Array<{
            issueNumber: number;
            slug: string;
            status: string;
            prNumber: number | null;
          }>;
        }
      ).bottles;
    return [...(await get('/api/bottles')), ...(await get('/api/bottles/history'))].find(
      (b) => b.issueNumber === issue,
    );
  };

  /** What the gate would do for the agent: push a branch, open its PR, relay both, signal done. */
  async function gateOpensPr(slug: string, issue: number): Promise<number> {
    const dir = gitea.git.dirOf('acme', 'widgets');
    const git = (...args: string[]) =>
      execFileSync('git', [`--git-dir=${dir}`, ...args], {
        encoding: 'utf8',
        env: {
          ...process.env,
          GIT_AUTHOR_NAME: 'Implementer',
          GIT_AUTHOR_EMAIL: 'i@example.test',
          GIT_COMMITTER_NAME: 'Implementer',
          GIT_COMMITTER_EMAIL: 'i@example.test',
        },
      }).trim();
    const branch = `bb/issue-${issue}`;
    const commit = git('commit-tree', 'main^{tree}', '-p', 'main', '-m', 'Fix it');
    git('update-ref', `refs/heads/${branch}`, commit);
    const res = await fetch(`${gitea.apiUrl}/repos/acme/widgets/pulls`, {
      method: 'POST',
      headers: { authorization: `token ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        head: branch,
        base: 'main',
        title: 'Fix it',
        body: `Fixes #${issue}`,
      }),
    });
    expect(res.status).toBe(201);
    const pr = ((await res.json()) as { number: number }).number;
    const p = bottlePaths(slug, { BB_HOME: home });
    appendFileSync(join(p.state, 'ops.jsonl'), `${JSON.stringify({ method: 'open_pr', pr })}\n`);
    const queue = new QueueWriter(p.queue, slug);
    queue.write('op', { method: 'open_pr', prNumber: pr });
    queue.write('done', { status: 'success', summary: 'Opened the PR.' });
    return pr;
  }

  it('launches, records, freezes, resumes and destroys bottles as groups of objects, never going into a pod', async () => {
    onTestFailed(() =>
      console.error('orchestrator log:', JSON.stringify(logs.slice(-40), null, 1)),
    );
    const n = fileIssue(gitea, 'implementer', 'Fix the thing', 'It is broken.');
    const launched = await until(
      'the agent pod',
      async () => {
        const r = await row(n);
        return r?.slug && pod(r.slug, 'agent') ? r : undefined;
      },
      30_000,
    );
    const slug = launched.slug;
    // The group: a claim, two policies, the gate's Service, Secret and pod, the agent's pod.
    for (const plural of ['persistentvolumeclaims', 'networkpolicies', 'services', 'secrets'])
      expect(of(plural, slug).length, plural).toBeGreaterThan(0);
    const agent = main(pod(slug, 'agent'));
    const gate = main(pod(slug, 'gate'));
    // The agent runs the provider's command for the issue's prompt, with no secret, under
    // the bridge that gives it its gate's forge surface as a local socket, and (a
    // supervised bottle) its proxies, which refuse everything until an approval, and
    // its supervise sidecar.
    expect(agent?.command.slice(0, 7)).toEqual([
      'node',
      '/opt/bb/runtime/bb-bridge.mjs',
      '/tmp/bb/forge.sock=gate:forge',
      '3128=gate:egress',
      '3129=gate:credentials',
      '/tmp/bb/supervise.sock=gate:supervise',
      '--',
    ]);
    expect(agent?.command.join(' ')).toMatch(/script-agent\.mjs --prompt .*Fix the thing/s);
    expect(envOf(agent)['BB_SIDECAR_SOCKET']).toBe('/tmp/bb/forge.sock');
    expect(JSON.stringify(pod(slug, 'agent'))).not.toContain(TOKEN);
    expect(pod(slug, 'agent')?.spec?.['automountServiceAccountToken']).toBe(false);
    // The gate has the forge kind's variables and the token, from its Secret only.
    // The forge sidecar's variables are a Docker gate's, with the pod's paths.
    expect(envOf(gate)).toMatchObject({
      FORGE_KIND: 'gitea',
      FORGE_GITEA_API: gitea.apiUrl,
      FORGE_OWNER: 'acme',
      FORGE_REPO: 'widgets',
      FORGE_ISSUE_NUMBER: String(n),
      FORGE_TOKEN_FILE: '/run/bb-secrets/token',
      BB_SIDECAR_SOCKET: '/tmp/bb/forge.sock',
      BB_QUEUE_DIR: '/queue',
      BB_OPS_LOG: '/state/ops.jsonl',
      BB_TURN_FILE: '/state/turn',
      BB_BRANCH: `bb/implementer-${n}`,
      BB_GATE_PORT: '7070',
    });
    expect(JSON.stringify(gate)).not.toContain(TOKEN);
    expect(of('secrets', slug)[0]?.stringData?.['token']).toBe(TOKEN);
    // The turn's key to its gate's port: the agent's bridge has it, the gate reads it from
    // its Secret.
    const key = envOf(agent)['BB_GATE_KEY'];
    expect(key).toMatch(/^[0-9a-f]{48}$/);
    expect(of('secrets', slug)[0]?.stringData?.['link-key']).toBe(key);
    expect(envOf(gate)['BB_GATE_KEY_FILE']).toBe('/run/bb-secrets/link-key');
    // Its queue and op log are its folder of the claim the orchestrator reads.
    expect(JSON.stringify(pod(slug, 'gate')?.spec)).toContain(`"subPath":"${slug}/queue"`);

    const pr = await gateOpensPr(slug, n);
    await until(
      'the PR learned while the agent works',
      async () => (await row(n))?.prNumber === pr,
    );
    // The turn outlasts the orchestrator's gate checks (every 3 s): a gate whose socket is
    // in its own pod is not taken for lost, and the agent is left to work.
    await new Promise((r) => setTimeout(r, 4_000));
    expect(pod(slug, 'agent'), 'the agent still works').toBeDefined();
    expect(logs.filter((l) => l['msg'] === 'watchdog fired')).toEqual([]);
    api.finishPod(NS, `bb-${slug}-agent`, 0, `{"type":"result","session_id":"sess-k8s-1"}\n`);
    await until('frozen', async () => (await row(n))?.status === 'frozen', 30_000);
    // Frozen: the pods and the Secret are gone, the claim (workspace, home, session) kept.
    expect(of('pods', slug)).toEqual([]);
    expect(of('secrets', slug)).toEqual([]);
    expect(of('persistentvolumeclaims', slug)).toHaveLength(1);
    const runs = (await (await fetch(`${orch.url}/api/runs?slug=${slug}`)).json()) as {
      runs: Array<{ turn: number; status: string }>;
    };
    expect(runs.runs.map((r) => [r.turn, r.status])).toEqual([[1, 'success']]);

    // A comment on the PR resumes the bottle in new pods, on the same session.
    gitea.comment('alice', 'acme/widgets', pr, 'please add a test');
    await until('the resumed agent pod', () => !!pod(slug, 'agent'), 30_000);
    const resumed = main(pod(slug, 'agent'))!.command;
    expect(envOf(main(pod(slug, 'agent')))['BB_GATE_KEY'], 'a new key each turn').not.toBe(key);
    expect(resumed).toContain('--resume');
    expect(resumed[resumed.indexOf('--resume') + 1]).toBe('sess-k8s-1');
    expect(resumed.join(' ')).toContain('please add a test');
    new QueueWriter(bottlePaths(slug, { BB_HOME: home }).queue, slug).write('done', {
      status: 'success',
      summary: 'Added the test.',
    });
    api.finishPod(NS, `bb-${slug}-agent`, 0, `{"type":"result","session_id":"sess-k8s-1"}\n`);
    await until(
      'frozen again',
      async () => {
        const r = (await (await fetch(`${orch.url}/api/runs?slug=${slug}`)).json()) as {
          runs: unknown[];
        };
        return (await row(n))?.status === 'frozen' && r.runs.length === 2;
      },
      30_000,
    );

    // Closing the PR destroys the bottle: nothing of it is left on the API server.
    gitea.setState('alice', 'acme/widgets', pr, 'closed');
    await until('destroyed', async () => (await row(n))?.status === 'destroyed', 30_000);
    for (const plural of [
      'pods',
      'secrets',
      'services',
      'networkpolicies',
      'persistentvolumeclaims',
    ])
      expect(of(plural, slug), plural).toEqual([]);
    calls.push(...api.calls);
    expect(calls.filter((c) => /\/(exec|attach|portforward)$/.test(c.path))).toEqual([]);
  }, 120_000);
});
