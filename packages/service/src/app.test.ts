import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { giteaKind } from '@bb/forge';
import { Capacity } from '@bb/lifecycle';
import { MemoryForgeStateStore } from '@bb/state';
import { sampleState } from '@bb/state/testing';
import { describe, expect, it } from 'vitest';
import { createApp } from './app';
import { loadConfig, parseDuration, webhookSecretsOf } from './config';
import { renderDashboard } from './dashboard';

describe('orchestrator configuration', () => {
  it('reads defaults and durations', () => {
    const c = loadConfig({
      FORGE_GITEA_API: 'http://gitea.test/api/v1',
      FORGE_TOKEN: 't',
      FORGE_WEBHOOK_SECRET: 'a-long-secret',
    });
    expect(c).toMatchObject({
      FORGE_ORG: 'bot-bottle',
      FORGE_WATCHDOG_TIMEOUT: 30 * 60_000,
      BB_PORT: 8080,
      BB_CONCURRENCY: 64,
      BB_STARTUP_CONCURRENCY: 2,
      BB_DONE_GRACE: 10_000,
      BB_LEDGER_RETENTION: 14 * 86_400_000,
      BB_WARM_WINDOW: 180_000,
    });
    expect(
      loadConfig({
        FORGE_GITEA_API: 'http://gitea.test/api/v1',
        FORGE_TOKEN: 't',
        FORGE_WEBHOOK_SECRET: 'a-long-secret',
        BB_MEMORY_BUDGET: '12g',
        BB_DONE_GRACE: '3s',
      }),
    ).toMatchObject({ BB_MEMORY_BUDGET: 12 * 1024 ** 3, BB_DONE_GRACE: 3000 });
    const base = {
      FORGE_GITEA_API: 'http://gitea.test/api/v1',
      FORGE_TOKEN: 't',
      FORGE_WEBHOOK_SECRET: 'a-long-secret',
    };
    expect(loadConfig(base).BB_SUPERVISE_DECIDERS).toBeUndefined();
    expect(loadConfig(base).BB_SUPERVISE_AUTO).toBe(false);
    expect(loadConfig({ ...base, BB_SUPERVISE_AUTO: 'on' }).BB_SUPERVISE_AUTO).toBe(true);
    expect(
      loadConfig({ ...base, BB_SUPERVISE_DECIDERS: 'alice, carol' }).BB_SUPERVISE_DECIDERS,
    ).toEqual(['alice', 'carol']);
    expect(() => loadConfig({ ...base, BB_SUPERVISE_DECIDERS: 'alice,@bob' })).toThrow(
      /BB_SUPERVISE_DECIDERS must be a comma-separated list of forge logins \(got "@bob"\)/,
    );
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('7d')).toBe(7 * 86_400_000);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('soon')).toBeUndefined();
  });

  it('names every bad value at once and never echoes a secret', () => {
    let msg = '';
    try {
      loadConfig({
        FORGE_GITEA_API: 'gitea',
        FORGE_WEBHOOK_SECRET: 'short',
        FORGE_WATCHDOG_TIMEOUT: 'forever',
        BB_PORT: '70000',
        BB_CONCURRENCY: '0',
        BB_STARTUP_CONCURRENCY: 'lots',
        BB_MEMORY_BUDGET: 'plenty',
      });
    } catch (err) {
      msg = (err as Error).message;
    }
    for (const part of [
      'FORGE_GITEA_API must be the Gitea API URL',
      'FORGE_TOKEN is required',
      'FORGE_WEBHOOK_SECRET must be at least 8',
      'FORGE_WATCHDOG_TIMEOUT must be a duration',
      'BB_PORT must be a port',
      'BB_CONCURRENCY must be a whole number',
      'BB_STARTUP_CONCURRENCY must be a whole number from 1 to 64',
      'BB_MEMORY_BUDGET must be a size such as 16g or 512m (got "plenty")',
    ]) {
      expect(msg).toContain(part);
    }
    expect(msg).not.toContain('short');
  });

  it('needs no FORGE_TOKEN with a GitHub App, and says both ways when it has neither', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-app-config-'));
    const key = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    writeFileSync(join(dir, 'app.pem'), key.export({ type: 'pkcs1', format: 'pem' }));
    const base = { FORGE_KIND: 'github', FORGE_WEBHOOK_SECRET: 'a-long-enough-secret' };
    const config = loadConfig({
      ...base,
      FORGE_GITHUB_APP_ID: '12',
      FORGE_GITHUB_APP_KEY_FILE: join(dir, 'app.pem'),
    });
    expect(config.FORGE_TOKEN).toBeUndefined();
    expect(config.forge.site.credentials?.describe).toBe('GitHub App 12');
    expect(() => loadConfig(base)).toThrow(
      /FORGE_TOKEN is required .*, or a GitHub App: FORGE_GITHUB_APP_ID and FORGE_GITHUB_APP_KEY_FILE/,
    );
    expect(() =>
      loadConfig({
        ...base,
        FORGE_TOKEN: 'ghp_botbotbotbotbot',
        FORGE_GITHUB_APP_ID: '12',
        FORGE_GITHUB_APP_KEY_FILE: join(dir, 'app.pem'),
      }),
    ).toThrow(
      /FORGE_TOKEN is set as well as a site identity of its own \(a GitHub App\): unset one/,
    );
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads the forge kind and its site, and the secrets a changing webhook accepts', () => {
    const c = loadConfig({
      FORGE_GITEA_API: 'http://gitea.test/api/v1',
      FORGE_TOKEN: 't',
      FORGE_WEBHOOK_SECRET: 'the-new-secret',
      FORGE_WEBHOOK_SECRET_PREVIOUS: 'the-old-secret\nan-older-one\n',
    });
    expect(c.forge.kind.name).toBe('gitea');
    expect(c.forge.site.cloneUrl({ owner: 'acme', repo: 'widgets' })).toBe(
      'http://gitea.test/acme/widgets.git',
    );
    expect(webhookSecretsOf(c)).toEqual(['the-new-secret', 'the-old-secret', 'an-older-one']);
    expect(() =>
      loadConfig({
        FORGE_GITEA_API: 'http://gitea.test/api/v1',
        FORGE_TOKEN: 't',
        FORGE_WEBHOOK_SECRET: 'the-new-secret',
        FORGE_WEBHOOK_SECRET_PREVIOUS: 'short',
      }),
    ).toThrow(/FORGE_WEBHOOK_SECRET_PREVIOUS must hold secrets of at least 8 characters/);
  });

  it('reads the sweep interval, the repos to sweep and the backend', () => {
    const base = {
      FORGE_GITEA_API: 'http://gitea.test/api/v1',
      FORGE_TOKEN: 't',
      FORGE_WEBHOOK_SECRET: 'a-long-secret',
    };
    expect(loadConfig(base)).toMatchObject({
      BB_SWEEP_INTERVAL: 300_000,
      FORGE_WATCHDOG_INTERVAL: 60_000,
      FORGE_REPOS: [],
      BB_BACKEND: 'docker',
    });
    expect(
      loadConfig({ ...base, BB_SWEEP_INTERVAL: '0', FORGE_REPOS: 'acme/widgets, acme/gears' }),
    ).toMatchObject({
      BB_SWEEP_INTERVAL: 0,
      FORGE_REPOS: [
        { owner: 'acme', repo: 'widgets' },
        { owner: 'acme', repo: 'gears' },
      ],
    });
    expect(() => loadConfig({ ...base, FORGE_REPOS: 'widgets', BB_BACKEND: 'k8s' })).toThrow(
      /FORGE_REPOS must be a comma-separated list of owner\/repo or org\/\* \(got "widgets"\)[\s\S]*BB_BACKEND "[^"]*" is not a known backend: use one of docker, kubernetes, local/,
    );
    expect(loadConfig({ ...base, FORGE_REPOS: 'acme/*' }).FORGE_REPOS).toEqual([
      { owner: 'acme', repo: '*' },
    ]);
  });

  it('needs a unit on every duration and says so, and reads the conversation switches', () => {
    const base = {
      FORGE_GITEA_API: 'http://gitea.test/api/v1',
      FORGE_TOKEN: 't',
      FORGE_WEBHOOK_SECRET: 'a-long-secret',
    };
    expect(() => loadConfig({ ...base, FORGE_WATCHDOG_TIMEOUT: '1800' })).toThrow(
      'FORGE_WATCHDOG_TIMEOUT needs a unit: "1800" could be seconds or milliseconds; write e.g. 1800s or 1800ms',
    );
    expect(() => loadConfig({ ...base, BB_DONE_GRACE: 'soon' })).toThrow(
      'BB_DONE_GRACE must be a duration such as 30m, 90s or 1500ms (got "soon")',
    );
    // Warm bottles: a duration, or 0/off to turn them off.
    expect(loadConfig({ ...base, BB_WARM_WINDOW: '0' }).BB_WARM_WINDOW).toBe(0);
    expect(loadConfig({ ...base, BB_WARM_WINDOW: 'off' }).BB_WARM_WINDOW).toBe(0);
    expect(loadConfig({ ...base, BB_WARM_WINDOW: '90s' }).BB_WARM_WINDOW).toBe(90_000);
    expect(() => loadConfig({ ...base, BB_WARM_WINDOW: 'a while' })).toThrow(
      'BB_WARM_WINDOW must be a duration such as 30m, 90s or 1500ms (got "a while"); 0 or off turns it off, 24h at most',
    );
    // The warm pool: agents and counts, none by default.
    expect(loadConfig(base).BB_POOL.size).toBe(0);
    expect([...loadConfig({ ...base, BB_POOL: 'claude:2' }).BB_POOL]).toEqual([['claude', 2]]);
    expect(() => loadConfig({ ...base, BB_POOL: 'claude=2' })).toThrow(
      'BB_POOL "claude=2": "claude=2" must be <agent>:<n>',
    );
    expect(loadConfig({ ...base, FORGE_WATCHDOG_TIMEOUT: '1800s' }).FORGE_WATCHDOG_TIMEOUT).toBe(
      1_800_000,
    );
    expect(loadConfig(base)).toMatchObject({
      FORGE_RESUME_ON_PUSH: false,
      FORGE_MENTION_ONLY: false,
      FORGE_FEEDBACK: true,
      FORGE_ACKNOWLEDGE: true,
    });
    expect(
      loadConfig({ ...base, FORGE_RESUME_ON_PUSH: 'on', FORGE_FEEDBACK: 'off' }),
    ).toMatchObject({ FORGE_RESUME_ON_PUSH: true, FORGE_FEEDBACK: false });
    expect(() => loadConfig({ ...base, FORGE_MENTION_ONLY: 'maybe' })).toThrow(
      'FORGE_MENTION_ONLY must be on or off (got "maybe")',
    );
  });
});

describe('orchestrator routes', () => {
  it('serves /healthz, /api/bottles with issue and PR URLs, the webhook and provenance routes, and 404', async () => {
    const store = new MemoryForgeStateStore();
    store.upsert(sampleState(17, { prNumber: 18, status: 'frozen' }));
    const app = createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 202 }) },
      provenance: async (req) =>
        new URL(req.url).pathname === '/api/runs' ? new Response('[]') : undefined,
      store,
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '1.2.3',
    });
    const get = (p: string, init?: RequestInit) =>
      app(new Request(`http://127.0.0.1:8080${p}`, init));
    expect(await (await get('/healthz')).json()).toEqual({ ok: true, version: '1.2.3' });
    const bottles = (await (await get('/api/bottles')).json()) as {
      bottles: Array<Record<string, unknown>>;
    };
    expect(bottles.bottles[0]).toMatchObject({
      issueNumber: 17,
      status: 'frozen',
      issueUrl: 'http://gitea.test/acme/widgets/issues/17',
      prUrl: 'http://gitea.test/acme/widgets/pulls/18',
    });
    expect((await get('/webhooks/gitea', { method: 'POST', body: '{}' })).status).toBe(202);
    expect((await get('/api/runs')).status).toBe(200);
    expect((await get('/nope')).status).toBe(404);
  });

  it('renders the dashboard with each bottle, its links and escaped text', async () => {
    const store = new MemoryForgeStateStore();
    store.upsert(sampleState(17, { prNumber: 18, status: 'frozen', agentName: 'implementer' }));
    const app = createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 202 }) },
      store,
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '1.2.3',
    });
    const res = await app(new Request('http://localhost:8080/'));
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await res.text();
    expect(html).toContain('<meta http-equiv="refresh"');
    expect(html).toContain('href="http://gitea.test/acme/widgets/issues/17"');
    expect(html).toContain('href="http://gitea.test/acme/widgets/pulls/18"');
    expect(html).toContain('No runs recorded yet.');
    // Whatever a row holds is escaped (the store itself refuses such a slug).
    const hostile = renderDashboard({
      bottles: [{ ...sampleState(19), slug: 'x-<script>' }],
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '1',
    });
    expect(hostile).toContain('x-&lt;script&gt;');
    expect(hostile).not.toContain('x-<script>');
  });

  it('lists what bottles ask the operator for, read-only: the dashboard, /api/supervise and awaitingOperator', async () => {
    const store = new MemoryForgeStateStore();
    const row = sampleState(21, { slug: 'impl-sup01', status: 'running' });
    store.upsert(row);
    const app = createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 202 }) },
      store,
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '1.2.3',
      proposals: () => [
        {
          id: 'sr_aaaaaaaaaaaaaaaaaaaa',
          slug: row.slug,
          kind: 'allowlist',
          createdAt: new Date(Date.now() - 120_000).toISOString(),
          justification: 'pip needs <pypi.org>',
          findings: [{ severity: 'high', message: '10.0.0.5 is a private address' }],
          rejections: 3,
        },
      ],
    });
    const html = await (await app(new Request('http://localhost:8080/'))).text();
    expect(html).toContain('<h2>Awaiting operator</h2>');
    expect(html).toContain('data-request="sr_aaaaaaaaaaaaaaaaaaaa"');
    expect(html).toContain('pip needs &lt;pypi.org&gt;');
    expect(html).toContain('looping: 3 rejections');
    expect(html).toMatch(/<span class="badge awaiting">awaiting operator<\/span>/);
    // Read-only: nothing on the page decides.
    expect(html).not.toMatch(/<form|<button/);
    const api = (await (await app(new Request('http://localhost:8080/api/supervise'))).json()) as {
      pending: unknown[];
    };
    expect(api.pending).toHaveLength(1);
    const bottles = (await (
      await app(new Request('http://localhost:8080/api/bottles'))
    ).json()) as {
      bottles: Array<{ slug: string; awaitingOperator: boolean }>;
    };
    expect(bottles.bottles.find((b) => b.slug === row.slug)?.awaitingOperator).toBe(true);
  });

  it('says on the dashboard and at /api/capacity what waits for capacity, and pages destroyed bottles', async () => {
    const store = new MemoryForgeStateStore();
    for (const n of [1, 2, 3]) {
      store.upsert(sampleState(n, { slug: `old-${n}`, status: 'frozen' }));
      store.upsert({
        ...store.get('acme', 'widgets', n)!,
        status: 'destroyed',
        updatedAt: `2026-01-0${n}T00:00:00.000Z`,
      });
    }
    const capacity = new Capacity({ maxStarting: 2, memoryBudget: 4 * 1024 ** 3 });
    capacity.tryRun('busy-1', 3 * 1024 ** 3);
    capacity.wait('acme/widgets#9', 2 * 1024 ** 3);
    capacity.holdPooled('claude-pool1', 30 * 1024 ** 2);
    const app = createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 202 }) },
      store,
      capacity,
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '1',
    });
    const html = await (await app(new Request('http://localhost:8080/'))).text();
    expect(html).toMatch(
      /running bottles take 3\.0 GiB of a 4\.0 GiB budget, 1 pooled ready for their issues hold 30 MB; <strong>1 waiting for capacity<\/strong>: <code>acme\/widgets#9<\/code>/,
    );
    const cap = await (await app(new Request('http://localhost:8080/api/capacity'))).json();
    expect(cap).toMatchObject({
      usedBytes: 3 * 1024 ** 3 + 30 * 1024 ** 2,
      memoryBudgetBytes: 4 * 1024 ** 3,
      maxStarting: 2,
      waiting: [{ issue: 'acme/widgets#9', bytes: 2 * 1024 ** 3 }],
      pooled: [{ slug: 'claude-pool1', bytes: 30 * 1024 ** 2 }],
    });
    expect(store.all()).toEqual([]);
    const page1 = (await (
      await app(new Request('http://localhost:8080/api/bottles/history?limit=2'))
    ).json()) as { bottles: { slug: string }[]; next: string };
    expect(page1.bottles.map((b: { slug: string }) => b.slug)).toEqual(['old-3', 'old-2']);
    const page2 = await (
      await app(
        new Request(`http://localhost:8080/api/bottles/history?limit=2&before=${page1.next}`),
      )
    ).json();
    expect(page2).toEqual({ bottles: [expect.objectContaining({ slug: 'old-1' })], next: null });
    const bad = await app(new Request('http://localhost:8080/api/bottles/history?limit=0'));
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toMatch(
      /history limit 0 must be 1 to 10000/,
    );
  });
});

describe('the door: who may use the dashboard and the APIs', () => {
  const app = (access: Parameters<typeof createApp>[0]['access']) =>
    createApp({
      webhook: { path: '/webhooks/gitea', handle: async () => new Response(null, { status: 202 }) },
      store: new MemoryForgeStateStore(),
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://gitea.test/api/v1' }),
      version: '0.0.0',
      access,
    });
  const get = (a: ReturnType<typeof app>, path: string, headers: Record<string, string> = {}) =>
    a(new Request(`http://127.0.0.1:8080${path}`, { headers }));
  const TOKEN = 'operator-token-0123456789abcdef';

  it('is open on loopback without a token, closed elsewhere; the webhook and health always answer', async () => {
    const open = app({ loopback: true });
    expect((await get(open, '/api/bottles')).status).toBe(200);
    // A rebinding page's name is not a loopback name.
    expect((await get(open, '/api/bottles', { host: 'evil.example:8080' })).status).toBe(403);
    expect((await get(open, '/api/bottles', { host: '127.0.0.1:8080' })).status).toBe(200);
    const closed = app({ loopback: false });
    for (const p of ['/', '/api/bottles', '/api/runs'])
      expect((await get(closed, p)).status, p).toBe(403);
    expect(await (await get(closed, '/api/runs')).text()).toMatch(/set BB_API_TOKEN/);
    expect((await get(closed, '/healthz')).status).toBe(200);
    expect(
      (
        await closed(
          new Request('http://127.0.0.1:8080/webhooks/gitea', { method: 'POST', body: '{}' }),
        )
      ).status,
    ).toBe(202);
  });

  it('with a token, asks for it as a bearer token or the cookie a /?token= visit sets', async () => {
    const a = app({ loopback: true, token: TOKEN });
    expect((await get(a, '/api/bottles')).status).toBe(401);
    expect((await get(a, '/api/bottles', { authorization: 'Bearer nope' })).status).toBe(401);
    expect((await get(a, '/api/bottles', { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    const visit = await get(a, `/?token=${TOKEN}`);
    expect(visit.status).toBe(303);
    expect(visit.headers.get('location')).toBe('/');
    const cookie = visit.headers.get('set-cookie')!;
    expect(cookie).toMatch(/HttpOnly; SameSite=Strict/);
    expect((await get(a, '/', { cookie: cookie.split(';')[0]! })).status).toBe(200);
    expect((await get(a, '/?token=wrong')).status).toBe(401);
  });
});
