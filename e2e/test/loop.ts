// The whole loop as the end-to-end tests run it: the Gitea-compatible test server
// sends real signed webhooks over HTTP to an orchestrator with real SQLite state,
// real bottles on the Docker engine and signed provenance (no secret scan).
import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { closeGiteaPools, GiteaForge, giteaKind } from '@bb/forge';
import {
  createGiteaTestServer,
  type GiteaTestServer,
  type GiteaWorldSeed,
} from '@bb/forge/testing';
import { DockerBackend } from '@bb/headless';
import {
  createWebhookHandler,
  headlessRunner,
  Orchestrator,
  type OrchestratorOptions,
  toNodeListener,
} from '@bb/lifecycle';
import { loadOrCreateSigningKey, ProvenanceStore, type SecretScanner } from '@bb/provenance';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { BASE_IMAGE } from '@bb/tooling/docker';
import { afterAll, beforeAll, onTestFailed } from 'vitest';
import { makeHome } from './support';

const noScan: SecretScanner = {
  scanCommits: async () => ({ tool: 'none', scanned: 'skipped in this test', findings: [] }),
};

export interface Loop {
  gitea: GiteaTestServer;
  orch: Orchestrator;
  store: SqliteForgeStateStore;
  prov: ProvenanceStore;
  backend: DockerBackend;
  logs: Array<Record<string, unknown>>;
  close(): Promise<void>;
}

/** Start the test forge, the webhook listener and the orchestrator for `home`. */
export async function startLoop(o: {
  home: string;
  token: string;
  secret: string;
  world: GiteaWorldSeed;
  options?: Partial<OrchestratorOptions>;
}): Promise<Loop> {
  const backend = new DockerBackend();
  const logs: Array<Record<string, unknown>> = [];
  const env = { BB_HOME: o.home, BB_BASE_IMAGE: BASE_IMAGE };
  const db = BbDatabase.open({ path: join(o.home, 'bot-bottle.db') });
  const store = new SqliteForgeStateStore({ database: db });
  const prov = new ProvenanceStore(db);
  const http: Server = createServer();
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const port = (http.address() as AddressInfo).port;
  const gitea = await createGiteaTestServer({
    world: o.world,
    hooks: [{ url: `http://127.0.0.1:${port}/webhooks/gitea`, secret: o.secret }],
  });
  const forgeFor = (owner: string, repo: string) =>
    new GiteaForge({ baseUrl: gitea.apiUrl, token: o.token, owner, repo });
  const orch = new Orchestrator({
    forgeFor,
    token: o.token,
    botLogin: 'bb-claude',
    forge: { kind: giteaKind, site: giteaKind.fromEnv({ FORGE_GITEA_API: gitea.apiUrl }) },
    store,
    inbox: store,
    runner: headlessRunner({ backend, env, token: o.token }),
    provenance: {
      store: prov,
      key: loadOrCreateSigningKey(o.home),
      scanner: noScan,
      bbVersion: '0.0.0',
      gitCommit: null,
    },
    env,
    log: (e) => logs.push(e),
    ...o.options,
  });
  const handler = createWebhookHandler({
    scheme: giteaKind.webhook,
    secrets: [o.secret],
    accept: (e) => orch.accept(e),
  });
  http.on(
    'request',
    toNodeListener(async (req) =>
      new URL(req.url).pathname === '/webhooks/gitea'
        ? handler(req)
        : new Response('not found', { status: 404 }),
    ),
  );
  return {
    gitea,
    orch,
    store,
    prov,
    backend,
    logs,
    close: async () => {
      orch.close();
      http.close();
      await gitea.close();
      db.close();
    },
  };
}

/** A started loop and the BB_HOME it runs in. */
export interface HomeLoop extends Loop {
  home: string;
}

/**
 * A loop for the enclosing `describe`: a home with these agents and a loop on it
 * are made before its tests and closed (the home removed, unless BB_KEEP_HOME)
 * after them. Call the function returned inside a test (a failing test then
 * prints the orchestrator's log).
 */
export function useLoop(o: {
  prefix: string;
  agents: Record<string, unknown>;
  token: string;
  secret: string;
  world: GiteaWorldSeed;
  options?: Partial<OrchestratorOptions>;
}): () => HomeLoop {
  let loop: HomeLoop | undefined;
  let home: string | undefined;
  beforeAll(async () => {
    home = makeHome(o.prefix, o.agents);
    const { token, secret, world, options } = o;
    loop = { ...(await startLoop({ home, token, secret, world, options })), home };
  });
  afterAll(async () => {
    await loop?.close();
    await closeGiteaPools();
    if (!home) return;
    if (process.env['BB_KEEP_HOME']) console.error(`kept ${home}`);
    else rmSync(home, { recursive: true, force: true });
  });
  return () => {
    if (!loop) throw new Error('the loop has not started: call this inside a test');
    const { logs } = loop;
    onTestFailed(() => console.error('orchestrator log:', JSON.stringify(logs, null, 1)));
    return loop;
  };
}
