// Operators see spend: /api/usage and the dashboard's panel sum what the run records
// say their turns used, per day, per agent and for the dearest issues.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { giteaKind } from '@bb/forge';
import { ProvenanceStore, type RunRecord, signRecord, type Usage } from '@bb/provenance';
import { sampleRecord, testSigningKey } from '@bb/provenance/testing';
import { BbDatabase, MemoryForgeStateStore } from '@bb/state';
import { describe, expect, it } from 'vitest';
import { createApp } from './app';

const usage = (input: number, costUsd: number): Usage => ({
  input,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  costUsd,
  models: [
    {
      model: 'claude-sonnet-4-5',
      requests: 1,
      input,
      output: 0,
      cacheRead: 0,
      cacheWrite: 0,
      estimated: 0,
      priced: 'claude-sonnet-4',
      costUsd,
    },
  ],
});

function withRuns() {
  const runs = new ProvenanceStore(
    BbDatabase.open({ path: join(mkdtempSync(join(tmpdir(), 'bb-spend-')), 'bb.db') }),
  );
  const key = testSigningKey();
  const add = (slug: string, turn: number, over: Partial<RunRecord>) =>
    runs.append(signRecord(sampleRecord(slug, turn, runs.head(slug), over), key));
  const today = new Date().toISOString();
  add('claude-1', 1, { startedAt: today, usage: usage(100_000, 0.3) });
  add('claude-1', 2, { startedAt: today, usage: usage(50_000, 0.15) });
  add('codex-2', 1, {
    startedAt: today,
    agent: 'codex',
    forge: { owner: 'acme', repo: 'widgets', issue: 9, prs: [] },
    usage: usage(10_000, 1.25),
  });
  // Long ago: outside the window.
  add('old-3', 1, { startedAt: '2020-01-01T00:00:00.000Z', usage: usage(9e6, 99) });
  const app = createApp({
    webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 202 }) },
    store: new MemoryForgeStateStore(),
    runs,
    site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
    version: '1.2.3',
  });
  return (p: string) => app(new Request(`http://127.0.0.1:8080${p}`));
}

describe('spend', () => {
  it('/api/usage sums the window per day, per agent and for the dearest issues', async () => {
    const get = withRuns();
    const res = await get('/api/usage?since=7d');
    expect(res.status).toBe(200);
    const s = (await res.json()) as Record<string, unknown>;
    expect(s['total']).toEqual({ turns: 3, tokens: 160_000, costUsd: 1.7 });
    expect(s['byAgent']).toEqual([
      { key: 'codex', turns: 1, tokens: 10_000, costUsd: 1.25 },
      { key: 'claude', turns: 2, tokens: 150_000, costUsd: 0.45 },
    ]);
    expect((s['topIssues'] as Array<{ key: string }>).map((r) => r.key)).toEqual([
      'acme/widgets#9',
      'acme/widgets#7',
    ]);
    expect((s['byDay'] as unknown[]).length).toBe(1);
    const all = (await (await get('/api/usage?since=2019-12-31')).json()) as {
      total: { turns: number };
    };
    expect(all.total.turns).toBe(4);
  });

  it('a window it cannot read is a 400 that says what to give', async () => {
    const res = await withRuns()('/api/usage?since=lately');
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toContain(
      'cannot read the time "lately": give a span back from now (7d, 24h, 90m, 2w) or a date',
    );
  });

  it("the dashboard's spend panel shows the last 7 days and each run's cost", async () => {
    const html = await (await withRuns()('/')).text();
    expect(html).toContain('<h2>Spend</h2>');
    expect(html).toMatch(
      /id="spend-total"[^>]*>Since [\d-]+: 3 turns, 160,000 tokens, about \$1\.70/,
    );
    expect(html).toContain('<td>codex</td><td>1</td><td>10,000</td><td>$1.25</td>');
    expect(html).toContain('<td>$0.3000</td>');
  });
});
