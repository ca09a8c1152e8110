// Child of webhook.bench.ts: an Orchestrator (built packages, no tsx) tracking
// 1,000 issues in a real SQLite store; prints its RSS in MB.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { giteaKind } from '@bb/forge';
import { DockerBackend } from '@bb/headless';
import { headlessRunner, Orchestrator } from '@bb/lifecycle';
import { loadOrCreateSigningKey, ProvenanceStore } from '@bb/provenance';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';

const home = mkdtempSync(join(tmpdir(), 'bb-rss-'));
const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
const store = new SqliteForgeStateStore({ database: db });
const t = new Date().toISOString();
const COUNT = Number(process.argv[2] ?? 1000);
for (let i = 1; i <= COUNT; i++) {
  store.upsert({
    owner: 'acme',
    repo: 'widgets',
    issueNumber: i,
    slug: `agent-${i}`,
    agentName: 'agent',
    bottleNames: ['default'],
    backendName: 'docker',
    agentGitUser: 'bot',
    prNumber: 1000 + i,
    status: 'frozen',
    lastCheckinAt: t,
    sessionId: `s-${i}`,
    cwd: '/workspace',
    createdAt: t,
    updatedAt: t,
  });
  store.recordDelivery(`k-${i}`);
}
const orch = new Orchestrator({
  forge: {
    kind: giteaKind,
    site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://127.0.0.1:1/api/v1' }),
  },
  token: 'x',
  botLogin: 'bot',
  store,
  inbox: store,
  runner: headlessRunner({ backend: new DockerBackend(), env: { BB_HOME: home }, token: 'x' }),
  provenance: {
    store: new ProvenanceStore(db),
    key: loadOrCreateSigningKey(home),
    scanner: { scanCommits: async () => ({ tool: '', scanned: '', findings: [] }) },
    bbVersion: '0',
    gitCommit: null,
  },
  env: { BB_HOME: home },
});
globalThis.gc?.();
await new Promise((r) => setTimeout(r, 200));
process.stdout.write(
  JSON.stringify({
    rssMb: process.memoryUsage().rss / 1024 / 1024,
    tracked: store.all().length,
    queued: orch.queue.size,
  }),
);
