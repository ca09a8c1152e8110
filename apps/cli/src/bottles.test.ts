// bb destroy, bb gc and bb forge hook install, on a real BB_HOME (SQLite state,
// bottle directories) and against the Gitea-compatible test server.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGiteaTestServer } from '@bb/forge/test-server';
import { type BottleMeta, LocalBackend, writeMeta } from '@bb/headless';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { sampleState } from '@bb/state/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { EXIT, runCli } from './cli';
import { captureIo as io } from './test-io';

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

const deps = { backend: () => new LocalBackend({ warn: () => {} }) };
const days = (n: number) => new Date(Date.now() - n * 86_400_000).toISOString();

/** A BB_HOME with bottles: a state row and a bottle directory each. */
function homeWith(bottles: Array<{ n: number; status: 'running' | 'frozen'; idleDays: number }>) {
  const home = mkdtempSync(join(tmpdir(), 'bb-gc-'));
  homes.push(home);
  const db = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
  const store = new SqliteForgeStateStore({ database: db });
  const slugs: string[] = [];
  for (const b of bottles) {
    const slug = `implementer-${b.n}`;
    slugs.push(slug);
    store.upsert(
      sampleState(b.n, {
        slug,
        status: b.status,
        updatedAt: days(b.idleDays),
        backendName: 'local',
      }),
    );
    mkdirSync(join(home, 'bottles', slug), { recursive: true });
    const meta: BottleMeta = {
      slug,
      agent: 'implementer',
      bottles: ['default'],
      backend: 'local',
      image: 'bb-base:latest',
      status: b.status,
      sessionId: 's',
      cwd: '/workspace',
      branch: `bb/implementer-${b.n}`,
      forge: null,
      turns: [],
      createdAt: days(b.idleDays),
    };
    writeMeta(meta, { BB_HOME: home });
  }
  db.close();
  const status = (n: number) => {
    const d = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
    try {
      return new SqliteForgeStateStore({ database: d }).get('acme', 'widgets', n)?.status;
    } finally {
      d.close();
    }
  };
  return { home, slugs, status };
}

describe('bb destroy', () => {
  it('removes a frozen bottle and marks its row destroyed; a running one needs --force', async () => {
    const w = homeWith([
      { n: 1, status: 'frozen', idleDays: 1 },
      { n: 2, status: 'running', idleDays: 0 },
    ]);
    const a = io({ BB_HOME: w.home });
    expect(await runCli(['destroy', w.slugs[0]!], a.io, deps)).toBe(EXIT.OK);
    expect(a.out).toBe('destroyed implementer-1 (acme/widgets#1)\n');
    expect(existsSync(join(w.home, 'bottles', w.slugs[0]!))).toBe(false);
    expect(w.status(1)).toBe('destroyed');
    const b = io({ BB_HOME: w.home });
    expect(await runCli(['destroy', w.slugs[1]!], b.io, deps)).toBe(1);
    expect(b.err).toMatch(/implementer-2 is running: .*--force/);
    expect(existsSync(join(w.home, 'bottles', w.slugs[1]!))).toBe(true);
    expect(
      await runCli(['destroy', w.slugs[1]!, '--force'], io({ BB_HOME: w.home }).io, deps),
    ).toBe(EXIT.OK);
    expect(w.status(2)).toBe('destroyed');
    const c = io({ BB_HOME: w.home });
    expect(await runCli(['destroy', 'nope-12345'], c.io, deps)).toBe(1);
    expect(c.err).toMatch(/no bottle nope-12345/);
    expect(await runCli(['destroy'], io({ BB_HOME: w.home }).io, deps)).toBe(EXIT.USAGE);
    // A path is never a slug: nothing outside $BB_HOME/bottles is reached.
    const outside = io({ BB_HOME: w.home });
    expect(await runCli(['destroy', '../..'], outside.io, deps)).toBe(EXIT.USAGE);
    expect(outside.err).toMatch(/"\.\.\/\.\." is not a bottle slug/);
    expect(existsSync(w.home)).toBe(true);
  });
});

describe('bb gc', () => {
  it('destroys frozen bottles idle for longer than --older-than, never running ones; --dry-run lists', async () => {
    const w = homeWith([
      { n: 1, status: 'frozen', idleDays: 40 },
      { n: 2, status: 'frozen', idleDays: 2 },
      { n: 3, status: 'running', idleDays: 90 },
    ]);
    const dry = io({ BB_HOME: w.home });
    expect(await runCli(['gc', '--dry-run'], dry.io, deps)).toBe(EXIT.OK);
    expect(dry.out).toMatch(/^would destroy implementer-1 \(acme\/widgets#1, no PR\), idle since /);
    expect(existsSync(join(w.home, 'bottles', 'implementer-1'))).toBe(true);
    const t = io({ BB_HOME: w.home });
    expect(await runCli(['gc', '--older-than', '1d'], t.io, deps)).toBe(EXIT.OK);
    expect(
      t.out
        .split('\n')
        .filter(Boolean)
        .map((l) => l.split(' ')[1]),
    ).toEqual(['implementer-1', 'implementer-2']);
    expect([w.status(1), w.status(2), w.status(3)]).toEqual(['destroyed', 'destroyed', 'running']);
    expect(existsSync(join(w.home, 'bottles', 'implementer-3'))).toBe(true);
    const bare = io({ BB_HOME: w.home });
    expect(await runCli(['gc', '--older-than', '14'], bare.io, deps)).toBe(EXIT.USAGE);
    expect(bare.err).toMatch(/--older-than needs a duration with a unit such as 14d.*"14"/);
  });
});

describe('bb forge hook install', () => {
  it('creates the repository webhook through the API, then updates it in place', async () => {
    const server = await createGiteaTestServer({
      world: {
        users: [{ login: 'bb-claude', tokens: ['bot-token-123456'] }, { login: 'alice' }],
        orgs: [{ name: 'acme', members: ['alice'] }],
        repos: [{ owner: 'acme', name: 'widgets', admins: ['bb-claude'] }],
      },
    });
    try {
      const env = {
        FORGE_GITEA_API: server.apiUrl,
        FORGE_TOKEN: 'bot-token-123456',
        FORGE_WEBHOOK_SECRET: 'a-long-secret',
      };
      const url = 'http://127.0.0.1:9/webhooks/gitea';
      const a = io(env);
      expect(
        await runCli(['forge', 'hook', 'install', '--repo', 'acme/widgets', '--url', url], a.io),
      ).toBe(EXIT.OK);
      expect(a.out).toMatch(/^created webhook \d+ of acme\/widgets/);
      expect(server.hooks.map((h) => [h.url, h.secret, h.events, h.active])).toEqual([
        [url, 'a-long-secret', ['issues', 'issue_comment', 'pull_request'], true],
      ]);
      const b = io({ ...env, FORGE_WEBHOOK_SECRET: 'a-rotated-secret' });
      expect(
        await runCli(['forge', 'hook', 'install', '--repo', 'acme/widgets', '--url', url], b.io),
      ).toBe(EXIT.OK);
      expect(b.out).toMatch(/^updated webhook/);
      expect(server.hooks.map((h) => h.secret)).toEqual(['a-rotated-secret']);
      // A user who does not administer the repository is refused by Gitea, and told so.
      server.tokens.set('alice-token-12345', 'alice');
      const c = io({ ...env, FORGE_TOKEN: 'alice-token-12345' });
      expect(
        await runCli(['forge', 'hook', 'install', '--repo', 'acme/widgets', '--url', url], c.io),
      ).toBe(1);
      expect(c.err).toMatch(/403/);
      expect(await runCli(['forge', 'hook', 'install', '--url', url], io(env).io)).toBe(EXIT.USAGE);
    } finally {
      await server.close();
    }
  });
});
