// A package outside this repository installs packed @bb/* tarballs (as npm would
// publish them: dist only, publishConfig exports) and runs the exported conformance
// suites (@bb/state/testing, @bb/forge/testing, @bb/headless/testing) against its own
// trivial implementations. Needs the packages built (scripts/test.sh builds first).
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const work = mkdtempSync(join(tmpdir(), 'bb-outside-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function pack(pkgDir: string): string {
  if (!existsSync(join(pkgDir, 'dist')))
    throw new Error(`${pkgDir} is not built: run pnpm build first`);
  execFileSync('pnpm', ['pack', '--pack-destination', work], { cwd: pkgDir, stdio: 'pipe' });
  // bb-forge-0.0.0.tgz, not bb-forge-sidecar-0.0.0.tgz.
  const exact = new RegExp(`^bb-${pkgDir.split('/').pop()}-\\d[^/]*\\.tgz$`);
  const name = readdirSync(work).find((f) => exact.test(f));
  return join(work, name!);
}

function install(tgz: string, name: string, modules: string): void {
  const dest = join(modules, '@bb', name);
  mkdirSync(dest, { recursive: true });
  execFileSync('tar', ['-xzf', tgz, '-C', dest, '--strip-components=1']);
}

describe('published @bb/state, used from outside the repository', () => {
  it('runs describeStoreConformance against a third party store and passes', () => {
    const project = join(work, 'third-party');
    const modules = join(project, 'node_modules');
    mkdirSync(modules, { recursive: true });
    // @bb/state and the @bb packages it depends on; third-party dependencies come from
    // the registry in real life: here, the copies this repository already installed.
    installWithDeps('state', modules);
    const req = createRequire(join(repo, 'packages', 'state', 'package.json'));
    for (const dep of ['better-sqlite3', 'zod', 'vitest']) {
      if (existsSync(join(modules, dep))) continue;
      const dir = realpathSync(dirname(req.resolve(`${dep}/package.json`)));
      symlinkSync(dir, join(modules, dep), 'dir');
    }
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'third-party', type: 'module', private: true }),
    );
    writeFileSync(
      join(project, 'store.test.js'),
      `import { MemoryForgeStateStore, SqliteForgeStateStore } from '@bb/state';
import { describeStoreConformance, describeLedgerConformance, describeInboxConformance } from '@bb/state/testing';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
// A third party's store: a thin subclass, as someone adding metrics might write.
class MyStore extends MemoryForgeStateStore {}
describeStoreConformance('MyStore', { create: () => new MyStore() });
describeLedgerConformance('MyStore', { create: () => new MyStore() });
describeInboxConformance('MyStore', { create: () => new MyStore() });
describeStoreConformance('published sqlite', {
  create: () => new SqliteForgeStateStore({ path: join(mkdtempSync(join(tmpdir(), 'x-')), 'db.sqlite') }),
  dispose: (s) => s.close(),
});
`,
    );
    const { status, output } = runOutside(project, modules);
    expect(status, output).toBe(0);
    // Every test passed, none skipped: the store suite twice (MyStore and the published
    // SQLite store), the ledger and inbox suites once (13 + 13 + 4 + 6 today).
    const tally = /Tests\s+(\d+) passed \((\d+)\)/.exec(output);
    expect(tally, output).not.toBeNull();
    expect(tally?.[1]).toBe(tally?.[2]);
    expect(Number(tally?.[1])).toBeGreaterThanOrEqual(36);
    for (const suite of [
      'ForgeStateStore conformance: MyStore',
      'DeliveryLedger conformance: MyStore',
      'EventInbox conformance: MyStore',
      'ForgeStateStore conformance: published sqlite',
    ])
      expect(output).toContain(suite);
    // It really resolved the packed files, not this repository's sources.
    expect(realpathSync(join(modules, '@bb', 'state'))).not.toContain(join(repo, 'packages'));
  });
});

/**
 * `name` and the workspace packages it depends on, packed and unpacked into `modules`;
 * their registry dependencies linked from this repository's installed copies.
 */
function installWithDeps(name: string, modules: string, done = new Set<string>()): void {
  if (done.has(name)) return;
  done.add(name);
  const dir = join(repo, 'packages', name);
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
    dependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
  };
  install(pack(dir), name, modules);
  const req = createRequire(join(dir, 'package.json'));
  for (const [dep, range] of Object.entries({
    ...manifest.dependencies,
    ...manifest.peerDependencies,
  })) {
    if (range.startsWith('workspace:')) installWithDeps(dep.replace('@bb/', ''), modules, done);
    else if (!existsSync(join(modules, dep))) {
      const found = packageDir(req, dep);
      if (!found) continue; // an optional peer this repository does not install
      mkdirSync(dirname(join(modules, dep)), { recursive: true });
      symlinkSync(found, join(modules, dep), 'dir');
    }
  }
}

/** Where `dep` is installed, from its package.json, or (a package that exports no package.json) from its entry. */
function packageDir(req: NodeRequire, dep: string): string | undefined {
  try {
    return realpathSync(dirname(req.resolve(`${dep}/package.json`)));
  } catch {}
  let entry: string;
  try {
    entry = realpathSync(req.resolve(dep));
  } catch {
    return undefined;
  }
  for (let d = dirname(entry); d !== dirname(d); d = dirname(d)) {
    const manifest = join(d, 'package.json');
    if (
      existsSync(manifest) &&
      (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string }).name === dep
    )
      return d;
  }
  return undefined;
}

function runOutside(project: string, modules: string) {
  const vitest = join(realpathSync(join(modules, 'vitest')), 'vitest.mjs');
  const res = spawnSync(
    process.execPath,
    [vitest, 'run', '--root', project, '--reporter=verbose'],
    {
      cwd: project,
      encoding: 'utf8',
      env: {
        ...process.env,
        NO_COLOR: '1',
        FORCE_COLOR: '0',
        VITEST: undefined,
        VITEST_POOL_ID: undefined,
        VITEST_WORKER_ID: undefined,
      },
      timeout: 180_000,
    },
  );
  return { status: res.status, output: `${res.stdout}\n${res.stderr}` };
}

describe('published @bb/forge and @bb/headless, plugged into from outside the repository', () => {
  it("registers a third party's forge kind, backend and agent provider by name, and runs their suites", () => {
    const project = join(work, 'third-party-plugs');
    const modules = join(project, 'node_modules');
    mkdirSync(modules, { recursive: true });
    installWithDeps('headless', modules);
    installWithDeps('forge', modules);
    if (!existsSync(join(modules, 'vitest'))) {
      const req = createRequire(join(repo, 'packages', 'forge', 'package.json'));
      symlinkSync(
        realpathSync(dirname(req.resolve('vitest/package.json'))),
        join(modules, 'vitest'),
        'dir',
      );
    }
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'third-party-plugs', type: 'module', private: true }),
    );
    writeFileSync(
      join(project, 'plugs.test.js'),
      `import { defaultBottleBranches, forgeKinds, registerForgeKind } from '@bb/forge';
import { describeForgeConformance, MemoryForge, MemoryForgeWorld, memoryWebhooks } from '@bb/forge/testing';
import { AgentManifestSchema, backendKinds, LocalBackend, providerFor, PROXY_API_KEY, registerProvider } from '@bb/headless';
import { describeBackendConformance, describeProviderConformance } from '@bb/headless/testing';
import { expect, test } from 'vitest';

// A third party's forge: an in-memory one with a kind of its own.
class MyForge extends MemoryForge {}
const kind = { name: 'mine', summary: 'mine', fromEnv: () => { throw new Error('no site'); }, webhook: memoryWebhooks, ...defaultBottleBranches };
describeForgeConformance('MyForge', {
  create: () => {
    const world = new MemoryForgeWorld();
    world.addMember('agents', 'bot');
    world.addMember('agents', 'other-bot');
    world.user('outsider');
    world.grant('acme', 'app', 'bot', 'write');
    const issue = world.addIssue('acme', 'app', { title: 'Fix it', author: 'outsider', labels: ['bot-bottle:implementer'], assignees: ['bot'] });
    const event = { kind: 'comment_created', key: 'mine:acme/app:comment#1', deliveryId: 'd', owner: 'acme', repo: 'app', sender: { id: 1, login: 'outsider' }, occurredAt: '2026-01-01T00:00:00Z', on: 'issue', number: issue, comment: { id: 1, author: 'outsider', body: 'hi' } };
    const signed = MemoryForge.signWebhook(event, 'a-secret-of-mine');
    return {
      forge: new MyForge({ owner: 'acme', repo: 'app', as: 'bot', world }),
      bot: 'bot', org: 'agents', member: 'other-bot', nonMember: 'outsider',
      issue, issueTitle: 'Fix it', issueLabel: 'bot-bottle:implementer', base: 'main',
      pushBranch: async (branch) => { world.pushBranch('acme', 'app', branch); },
      merge: async (pr) => world.merge('acme', 'app', pr),
      changedFile: 'CHANGE.md',
      review: async (pr, input) => { world.review('acme', 'app', pr, { author: 'other-bot', ...input }); },
      webhooks: [{ name: 'a comment', headers: signed.headers, body: signed.body, secret: 'a-secret-of-mine', expect: { kind: 'comment_created' } }],
      webhook: memoryWebhooks,
      kind,
    };
  },
});

// A third party's backend: the local one under another name, registered by name.
class MyBackend extends LocalBackend {}
describeBackendConformance('MyBackend', { create: () => new MyBackend({ warn: () => {} }), image: 'unused' });
backendKinds.register('mine', () => new MyBackend({ warn: () => {} }));

// A third party's agent CLI: one registry call, then manifests and forklift take its name.
const mine = registerProvider({
  name: 'mine',
  modelApis: ['openai'],
  invocation: (input) => ({
    cmd: ['mine', '--json', ...(input.sessionId ? ['--session', input.sessionId] : []), '--', input.prompt],
    env: input.modelApi ? { MINE_API: input.modelApi.baseUrl, MINE_KEY: PROXY_API_KEY } : {},
    files: {},
  }),
  parseResult(stdout, exitCode) {
    const line = stdout.split('\\n').find((l) => l.startsWith('{"done"'));
    const done = line ? JSON.parse(line) : undefined;
    const ok = exitCode === 0 && !!done;
    return { sessionId: done?.session, ok, ...(ok ? { tokens: done.read } : { error: 'no done line' }) };
  },
});
describeProviderConformance('mine', {
  provider: mine,
  recorded: { stdout: '{"done":true,"session":"m-1","read":321}\\n', exitCode: 0, sessionId: 'm-1', tokens: 321 },
});

// And each is found by name where bot-bottle looks for it.
registerForgeKind(kind);
test('the registered forge kind, backend and provider are found by name', () => {
  expect(forgeKinds.get('mine')).toBe(kind);
  expect(backendKinds.names()).toContain('mine');
  expect(providerFor('mine')).toBe(mine);
  expect(AgentManifestSchema.parse({ provider: 'mine', git: { name: 'Mine', email: 'mine@example.test' } }).provider).toBe('mine');
});
`,
    );
    const { status, output } = runOutside(project, modules);
    expect(status, output).toBe(0);
    for (const suite of [
      'Forge conformance: MyForge',
      'Backend conformance: MyBackend',
      'Provider conformance: mine',
      'the registered forge kind, backend and provider are found by name',
    ])
      expect(output).toContain(suite);
    // Everything ran but what an in-memory forge cannot do (a real git push), which
    // shows as skipped with its reason.
    const tally = /Tests\s+(\d+) passed \| (\d+) skipped \((\d+)\)/.exec(output);
    expect(tally, output).not.toBeNull();
    expect(Number(tally?.[1])).toBeGreaterThanOrEqual(20);
    expect(tally?.[2], output).toBe('1');
    expect(output).toMatch(/gitRemote takes a real push.*cannot push/);
    expect(realpathSync(join(modules, '@bb', 'forge'))).not.toContain(join(repo, 'packages'));
    expect(realpathSync(join(modules, '@bb', 'headless'))).not.toContain(join(repo, 'packages'));
  }, 300_000);
});
