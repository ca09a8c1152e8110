// The supervise plane with the real Claude Code CLI, forge-driven: the agent is
// refused a credentialed route, calls `cred-proxy-block` over MCP and waits; the
// bottle says `awaiting operator` and its watchdog (3 s here) does not fire; the
// orchestrator is restarted while the request waits; the operator approves with
// `bb supervise approve`; the proxy reloads and the same turn reaches the route.
// The turn's signed record carries the request and the decision.
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CliIo, runCli } from '@bb/cli';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { bottlePaths, DockerBackend, mountBottleDisk, unmountBottleDisk } from '@bb/headless';
import { ProvenanceStore } from '@bb/provenance';
import { createScriptedModelServer, type ScriptedModelServer } from '@bb/scripted-model';
import { type RunningOrchestrator, serve } from '@bb/service';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destroyHome, fileIssue, forgeWorld, probeAgentsImage, until } from './support';

const docker = await probeDocker();
const { ok: hasImage, image: AGENTS_IMAGE } = await probeAgentsImage(docker.ok);

const TOKEN = 'bb-claude-token-supervise-4242';
const SECRET = 'supervise-webhook-secret';
const MODEL_KEY = 'sk-test-model-key-supervise-5d1c';
const SVC_KEY = 'sk-svc-key-supervise-77ab03e1';

/** A node one-liner: GET a path through the credential proxy's bottle port, answer to a workspace file. */
const fetchSvc = (out: string) =>
  `node -e "require('http').get('http://127.0.0.1:3129/svc/items',r=>{let b='';r.on('data',d=>b+=d);r.on('end',()=>require('fs').writeFileSync('${out}',r.statusCode+' '+b))}).on('error',e=>require('fs').writeFileSync('${out}','error '+e.message))"; cat ${out}`;

/** The tool results Claude Code sent back to the model, in order (each once). */
function toolResults(model: ScriptedModelServer): string[] {
  const seen = new Map<string, string>();
  for (const r of model.requests) {
    const messages = (r.body as { messages?: Array<{ content?: unknown }> }).messages ?? [];
    for (const m of messages)
      for (const c of Array.isArray(m.content) ? m.content : []) {
        const block = c as { type?: string; tool_use_id?: string; content?: unknown };
        if (block.type !== 'tool_result' || !block.tool_use_id || seen.has(block.tool_use_id))
          continue;
        const text = Array.isArray(block.content)
          ? block.content.map((x: { text?: string }) => x.text ?? '').join('')
          : String(block.content ?? '');
        seen.set(block.tool_use_id, text);
      }
  }
  return [...seen.values()];
}

describe.skipIf(!hasImage)('supervise with the real Claude Code CLI, through the service', () => {
  let home: string;
  let gitea: GiteaTestServer;
  let orch: RunningOrchestrator;
  let model: ScriptedModelServer;
  let svc: Server;
  let svcUrl = '';
  const svcSeen: Array<{ url: string; key: unknown }> = [];
  const backend = new DockerBackend();
  let env: Record<string, string>;

  const start = async () => {
    orch = await serve({
      env,
      backend,
      logStream: { write: () => true } as unknown as NodeJS.WritableStream,
    });
    gitea.addHook({ url: `${orch.url}/webhooks/gitea`, secret: SECRET });
  };
  const cli = async (...args: string[]) => {
    let out = '';
    let err = '';
    const io: CliIo = {
      env: { ...env },
      cwd: home,
      stdout: (t) => (out += t),
      stderr: (t) => (err += t),
    };
    const code = await runCli(args, io);
    return { code, out, err };
  };

  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'bb-supervise-svc-'));
    mkdirSync(join(home, 'config', 'agents'), { recursive: true });
    mkdirSync(join(home, 'config', 'bottles'), { recursive: true });
    svc = createServer((req, res) => {
      svcSeen.push({ url: req.url ?? '', key: req.headers['x-api-key'] });
      res.end('three items');
    });
    await new Promise<void>((r) => svc.listen(0, '127.0.0.1', r));
    svcUrl = `http://127.0.0.1:${(svc.address() as { port: number }).port}/api`;
    model = await createScriptedModelServer({ script: [{ say: 'not set yet' }] });
    writeFileSync(
      join(home, 'config', 'agents', 'claude.json'),
      JSON.stringify({
        provider: 'claude',
        model: 'scripted-model',
        retries: 0,
        bottles: ['claude'],
        git: { name: 'claude', email: 'c@example.test' },
      }),
    );
    writeFileSync(
      join(home, 'config', 'bottles', 'claude.json'),
      JSON.stringify({
        image: AGENTS_IMAGE,
        credentials: [
          {
            route: '/anthropic',
            upstream: model.url,
            headers: { 'x-api-key': 'env:BB_TEST_MODEL_KEY' },
          },
        ],
      }),
    );
    // The operator lets SVC_KEY go to the test service.
    writeFileSync(
      join(home, 'config', 'supervise.json'),
      JSON.stringify({ credentialHosts: { SVC_KEY: ['127.0.0.1'] } }),
    );
    gitea = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
    env = {
      BB_HOME: home,
      BB_BASE_IMAGE: process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest',
      BB_PORT: '0',
      FORGE_GITEA_API: gitea.apiUrl,
      FORGE_TOKEN: TOKEN,
      FORGE_WEBHOOK_SECRET: SECRET,
      BB_SWEEP_INTERVAL: '0',
      // A watchdog that would fire during the wait if waiting were silence.
      FORGE_WATCHDOG_TIMEOUT: '3s',
      FORGE_WATCHDOG_INTERVAL: '1s',
      BB_TEST_MODEL_KEY: MODEL_KEY,
      SVC_KEY,
    };
    await start();
  }, 60_000);

  afterAll(async () => {
    await orch?.close();
    await gitea?.close();
    await model?.close();
    svc?.close();
    await destroyHome(home, backend);
  });

  it('claude asks for a route over MCP, waits across an orchestrator restart, is approved and reaches it in the same turn', async () => {
    const routes = `${JSON.stringify(
      {
        routes: [
          {
            prefix: '/anthropic',
            upstream: model.url,
            headers: { 'x-api-key': 'env:BB_TEST_MODEL_KEY' },
          },
          { prefix: '/svc', upstream: svcUrl, headers: { 'x-api-key': 'env:SVC_KEY' } },
        ],
      },
      null,
      2,
    )}\n`;
    const n = fileIssue(gitea, 'claude', 'List the items', 'Read /svc/items.');
    model.setScript([
      {
        tools: [
          {
            name: 'Bash',
            input: { command: fetchSvc('/tmp/before.txt'), description: 'try the service' },
          },
        ],
      },
      {
        tools: [
          {
            name: 'mcp__supervise__cred-proxy-block',
            input: {
              routes,
              justification: 'The issue asks me to read /svc/items, which needs the svc API key.',
            },
          },
        ],
      },
      {
        tools: [
          {
            name: 'Bash',
            input: { command: fetchSvc('/tmp/after.txt'), description: 'try again' },
          },
        ],
      },
      {
        tools: [
          {
            name: 'mcp__forge__signal_done',
            input: { status: 'success', summary: 'Read the items.' },
          },
        ],
      },
      { say: 'Done.' },
    ]);
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    const row = () => new SqliteForgeStateStore({ database: db }).get('acme', 'widgets', n);
    try {
      // The request reaches the operator; the bottle says so.
      const listed = await until(
        'the request to be listed',
        async () => {
          const r = await cli('supervise', 'list', '--json');
          const rows = JSON.parse(r.out) as Array<{
            id: string;
            slug: string;
            kind: string;
            tool: string;
            evidence: unknown[];
          }>;
          return rows[0];
        },
        120_000,
      );
      expect(listed).toMatchObject({ kind: 'routes', tool: 'cred-proxy-block' });
      expect(listed.evidence).toEqual([
        expect.objectContaining({ kind: 'credential', route: '/svc' }),
      ]);
      const status = JSON.parse((await cli('orchestrate', 'status', '--json')).out) as {
        bottles: Array<{ slug: string; awaitingOperator: boolean; status: string }>;
      };
      expect(status.bottles.find((b) => b.slug === listed.slug)).toMatchObject({
        status: 'running',
        awaitingOperator: true,
      });

      // The orchestrator goes away and comes back while the request waits.
      await orch.close();
      await start();
      // Longer than the watchdog's 3 s: waiting for the operator is not silence.
      await new Promise((r) => setTimeout(r, 5000));
      expect(row()?.status).toBe('running');
      expect(
        (await backend.list({ 'bb.slug': listed.slug })).find(
          (c) => c.labels['bb.role'] === 'agent',
        )?.state,
      ).toBe('running');

      const approved = await cli('supervise', 'approve', listed.id, '--json');
      expect(approved.err).toBe('');
      expect(approved.code).toBe(0);
      expect(JSON.parse(approved.out)).toMatchObject({
        request: { status: 'approved' },
        remediation: { ok: true },
      });

      await until(
        'the turn to end frozen',
        () => (row()?.status === 'frozen' ? true : undefined),
        120_000,
      );
      // Before: refused with the fix named; after: the proxy added the key.
      const results = toolResults(model);
      expect(results[0]).toMatch(/^404 .*"error":"no_credential_route".*"tool":"cred-proxy-block"/);
      expect(JSON.parse(results[1]!)).toMatchObject({
        status: 'approved',
        request_id: listed.id,
        kind: 'routes',
      });
      expect(results[2]).toBe('200 three items');
      const toolResultsText = results.join('\n');
      expect(svcSeen).toEqual([{ url: '/api/items', key: SVC_KEY }]);
      const [record] = new ProvenanceStore(db).chain(listed.slug);
      expect(record!.record.watchdogFired).toBeNull();
      expect(record!.record.supervise).toEqual([
        expect.objectContaining({
          id: listed.id,
          kind: 'routes',
          status: 'approved',
          decision: expect.objectContaining({ scope: 'turn', override: false }),
          remediation: expect.objectContaining({ ok: true }),
        }),
      ]);
      // The key reached the service and nothing the agent can read.
      await mountBottleDisk(listed.slug, { BB_HOME: home });
      try {
        const p = bottlePaths(listed.slug, { BB_HOME: home });
        for (const f of ['routes.json', 'allowlist.json'])
          expect(readFileSync(join(p.currentConfig, f), 'utf8')).not.toContain(SVC_KEY);
      } finally {
        await unmountBottleDisk(listed.slug, { BB_HOME: home });
      }
      expect(toolResultsText).not.toContain(SVC_KEY);
    } finally {
      db.close();
    }
  }, 300_000);
});
