// A package outside this repository installs the packed @bb/state and @bb/errors
// tarballs (as npm would publish them: dist only, publishConfig exports) and runs
// the conformance suite from @bb/state/testing against its own store. Needs the
// packages built (scripts/test.sh builds first).
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
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
  const name = readdirSync(work).find(
    (f) => f.startsWith(`bb-${pkgDir.split('/').pop()}-`) && f.endsWith('.tgz'),
  );
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
    install(pack(join(repo, 'packages', 'errors')), 'errors', modules);
    install(pack(join(repo, 'packages', 'state')), 'state', modules);
    // Third-party dependencies come from the registry in real life; here, link the
    // copies this repository already installed.
    const req = createRequire(join(repo, 'packages', 'state', 'package.json'));
    for (const dep of ['better-sqlite3', 'zod', 'vitest']) {
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
        timeout: 120_000,
      },
    );
    const output = `${res.stdout}\n${res.stderr}`;
    expect(res.status, output).toBe(0);
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
