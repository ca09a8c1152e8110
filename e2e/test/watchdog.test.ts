// The watchdog on a real Docker engine: an agent that goes silent, and one whose
// forge sidecar dies, are stopped and their bottles frozen with watchdogFired in
// provenance. Timeouts come from configuration (short here), not sleeping tests.
import { existsSync, readFileSync, rmSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { closeGiteaPools, GiteaForge, giteaKind } from '@bb/forge';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { DockerBackend, GATE_ROLE } from '@bb/headless';
import { headlessRunner, Orchestrator } from '@bb/lifecycle';
import { loadOrCreateSigningKey, ProvenanceStore } from '@bb/provenance';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileIssue, forgeWorld, makeHome, scriptAgent, until } from './support';

const docker = await probeDocker();
const TOKEN = 'bb-claude-token-watchdog-31';

describe.skipIf(!docker.ok)('real Docker: the watchdog', () => {
  let gitea: GiteaTestServer;
  const homes: string[] = [];
  const backend = new DockerBackend();
  const orchestrators: Orchestrator[] = [];
  beforeAll(async () => {
    gitea = await createGiteaTestServer({
      world: forgeWorld(TOKEN),
    });
  });
  afterAll(async () => {
    for (const o of orchestrators) o.close();
    await gitea?.close();
    await closeGiteaPools();
    for (const h of homes) rmSync(h, { recursive: true, force: true });
  });

  function orchestrator(timeoutMs: number) {
    const home = makeHome('bb-watchdog-', {
      sleeper: scriptAgent([{ steps: [{ do: 'read_issue' }, { do: 'sleep', ms: 120_000 }] }]),
    });
    homes.push(home);
    const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    const store = new SqliteForgeStateStore({ database: db });
    const prov = new ProvenanceStore(db);
    const env = { BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE };
    const orch = new Orchestrator({
      forgeFor: (o, r) =>
        new GiteaForge({ baseUrl: gitea.apiUrl, token: TOKEN, owner: o, repo: r }),
      token: TOKEN,
      botLogin: 'bb-claude',
      forge: { kind: giteaKind, site: giteaKind.fromEnv({ FORGE_GITEA_API: gitea.apiUrl }) },
      store,
      inbox: store,
      runner: headlessRunner({ backend, env, token: TOKEN }),
      provenance: {
        store: prov,
        key: loadOrCreateSigningKey(home),
        scanner: { scanCommits: async () => ({ tool: 'none', scanned: '', findings: [] }) },
        bbVersion: '0',
        gitCommit: null,
      },
      env,
      gateCheckMs: 1000,
      watchdogTimeoutMs: timeoutMs,
      watchdogIntervalMs: 200,
      log: (e) => process.env['BB_DEBUG_WATCHDOG'] && console.log(JSON.stringify(e)),
    });
    orch.startWatchdog();
    orchestrators.push(orch);
    return { orch, store, prov, home };
  }

  function target(orch: Orchestrator, n: number) {
    const issue = gitea.issue('acme/widgets', n);
    return orch.accept({
      kind: 'issue_targeting_changed',
      action: 'assigned',
      key: `test:${n}`,
      deliveryId: undefined,
      owner: 'acme',
      repo: 'widgets',
      sender: { id: 1, login: 'alice' },
      occurredAt: issue.updatedAt,
      issue: {
        number: n,
        title: issue.title,
        labels: ['bot-bottle:sleeper'],
        assignees: ['bb-claude'],
        state: 'open',
      },
    });
  }

  it('stops an agent that goes silent and records watchdogFired: silence', async () => {
    const { orch, store, prov } = orchestrator(1500);
    const n = fileIssue(gitea, 'sleeper', 'Silent one');
    const t0 = Date.now();
    await target(orch, n);
    const row = await until('the silent bottle to be frozen', () => {
      const r = store.get('acme', 'widgets', n);
      return r?.status === 'frozen' && prov.chain(r.slug).length === 1 ? r : undefined;
    });
    expect(Date.now() - t0).toBeLessThan(60_000);
    const rec = prov.chain(row.slug)[0]!.record;
    expect(rec.watchdogFired).toMatchObject({ reason: 'silence' });
    expect(rec.done).toBeNull();
    expect(await backend.list({ 'bb.slug': row.slug })).toEqual([]);
    // The thread is told once, in plain words, with how to go on.
    const told = await until('the thread to be told', () => {
      const c = gitea.issue('acme/widgets', n).comments.map((x) => x.body);
      return c.length > 0 ? c : undefined;
    });
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(/^The agent went quiet \(no check-in for \d+ s/);
    expect(told[0]).toContain('Reply here to have it carry on.');
    orch.stopWatchdog();
  }, 90_000);

  async function serving(store: SqliteForgeStateStore, home: string, n: number) {
    return until('the bottle to run and its sidecar to serve', async () => {
      const r = store.get('acme', 'widgets', n);
      if (r?.status !== 'running') return undefined;
      const cs = await backend.list({ 'bb.slug': r.slug });
      if (!cs.some((c) => c.labels['bb.role'] === 'agent' && c.state === 'running'))
        return undefined;
      // Only once it is serving: the agent's first call is in its op log.
      const ops = join(home, 'bottles', r.slug, 'state', 'ops.jsonl');
      return existsSync(ops) && readFileSync(ops, 'utf8').includes('read_issue')
        ? r.slug
        : undefined;
    });
  }

  it('notices a deleted sidecar socket within seconds and stops the agent', async () => {
    const { orch, store, prov, home } = orchestrator(10 * 60_000);
    const n = fileIssue(gitea, 'sleeper', 'Unreachable one');
    await target(orch, n);
    const slug = await serving(store, home, n);
    const deletedAt = Date.now();
    unlinkSync(join(home, 'bottles', slug, 'sock', 'forge.sock'));
    await until('the bottle to be frozen', () =>
      store.get('acme', 'widgets', n)?.status === 'frozen' && prov.chain(slug).length === 1
        ? true
        : undefined,
    );
    expect(Date.now() - deletedAt).toBeLessThan(45_000);
    expect(prov.chain(slug)[0]!.record.watchdogFired).toMatchObject({
      reason: 'sidecar_death',
      detail: 'the forge sidecar socket was removed',
    });
  }, 90_000);

  it('notices a killed gate within seconds and records watchdogFired: sidecar_death', async () => {
    const { orch, store, prov, home } = orchestrator(10 * 60_000);
    const n = fileIssue(gitea, 'sleeper', 'Lonely one');
    await target(orch, n);
    const slug = await serving(store, home, n);
    const gate = (await backend.list({ 'bb.slug': slug })).find(
      (c) => c.labels['bb.role'] === GATE_ROLE,
    )!;
    const killedAt = Date.now();
    await new Docker().getContainer(gate.id).kill();
    await until('the bottle to be frozen', () =>
      store.get('acme', 'widgets', n)?.status === 'frozen' && prov.chain(slug).length === 1
        ? true
        : undefined,
    );
    expect(Date.now() - killedAt).toBeLessThan(45_000);
    expect(prov.chain(slug)[0]!.record.watchdogFired).toMatchObject({ reason: 'sidecar_death' });
    orch.stopWatchdog();
  }, 90_000);
});
