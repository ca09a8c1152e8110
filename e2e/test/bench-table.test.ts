// `pnpm bench`'s verdict and its kept history (scripts/bench-table.mjs), on results
// written here: a missed goal fails the run, as does a result this run did not write;
// each run leaves a dated line with the commit, the machine and this run's figures.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
// @ts-expect-error a plain ES module script of the repository, without types
import { report } from '../../scripts/bench-table.mjs';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function bench(results: Array<{ name: string; pass: boolean; old?: boolean }>) {
  const dir = mkdtempSync(join(tmpdir(), 'bb-bench-'));
  dirs.push(dir);
  mkdirSync(join(dir, 'results'));
  for (const r of results) {
    const file = join(dir, 'results', `${r.name}.json`);
    writeFileSync(
      file,
      JSON.stringify({
        name: r.name,
        metric: 'p50 ms',
        ours: 2,
        baseline: 1,
        ratio: 2,
        target: '<= 3',
        pass: r.pass,
      }),
    );
    if (r.old) utimesSync(file, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
  }
  return dir;
}

const run = (dir: string, since?: number, quick = false) => {
  const out: string[] = [];
  const err: string[] = [];
  const code = report({
    dir,
    since,
    quick,
    log: (l: string) => out.push(l),
    warn: (l: string) => err.push(l),
  });
  return { code, out: out.join('\n'), err: err.join('\n') };
};

describe('pnpm bench: the verdict and the history', () => {
  it('passes when every result is this run and met its goal, and keeps a dated line', () => {
    const dir = bench([
      { name: 'a', pass: true },
      { name: 'b', pass: true },
    ]);
    const r = run(dir, Date.now() - 60_000);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/All benchmarks \(2\)/);
    const lines = readFileSync(join(dir, 'history.jsonl'), 'utf8').trim().split('\n');
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!);
    expect(line.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(line.machine).toMatchObject({
      cores: expect.any(Number),
      memoryBytes: expect.any(Number),
      kernel: expect.any(String),
    });
    expect(line.results.map((x: { name: string }) => x.name)).toEqual(['a', 'b']);
    // A second run adds a line; nothing is rewritten.
    run(dir, Date.now() - 60_000);
    expect(readFileSync(join(dir, 'history.jsonl'), 'utf8').trim().split('\n')).toHaveLength(2);
  });

  it('fails on a missed goal, naming it', () => {
    const r = run(
      bench([
        { name: 'fast', pass: true },
        { name: 'slow', pass: false },
      ]),
      Date.now() - 60_000,
    );
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/missed its goal: slow/);
  });

  it('fails on a result this run did not write, and keeps only this run in the history', () => {
    const dir = bench([
      { name: 'ran', pass: true },
      { name: 'gone', pass: true, old: true },
    ]);
    const r = run(dir, Date.now() - 60_000);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/gone .*STALE/);
    expect(r.err).toMatch(/not written by this run .*: gone/);
    const line = JSON.parse(readFileSync(join(dir, 'history.jsonl'), 'utf8'));
    expect(line.results.map((x: { name: string }) => x.name)).toEqual(['ran']);
  });

  it('fails when there is no result at all', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-bench-empty-'));
    dirs.push(dir);
    expect(run(dir).code).toBe(1);
  });

  it('quick mode passes a missed goal (a few rounds judge nothing) but not a result this run did not write, and keeps no history', () => {
    const dir = bench([
      { name: 'fast', pass: true },
      { name: 'slow', pass: false },
    ]);
    const quick = run(dir, Date.now() - 60_000, true);
    expect(quick.code).toBe(0);
    expect(quick.out).toMatch(/quick mode/);
    expect(() => readFileSync(join(dir, 'history.jsonl'))).toThrow();
    const stale = bench([
      { name: 'ran', pass: true },
      { name: 'gone', pass: true, old: true },
    ]);
    expect(run(stale, Date.now() - 60_000, true).code).toBe(1);
  });
});

// docs/benchmarks.md explains every benchmark `pnpm bench` runs: each file a package's
// `bench` script names is in its table, and each file the table names is run.
describe('docs/benchmarks.md', () => {
  const root = resolve(import.meta.dirname, '..', '..');
  const doc = readFileSync(join(root, 'docs', 'benchmarks.md'), 'utf8');
  const run = ['packages', 'apps']
    .flatMap((d) => readdirSync(join(root, d)).map((p) => `${d}/${p}`))
    .concat('e2e')
    .flatMap((dir) => {
      const f = join(root, dir, 'package.json');
      if (!existsSync(f)) return [];
      const script = (JSON.parse(readFileSync(f, 'utf8')) as { scripts?: Record<string, string> })
        .scripts?.['bench'];
      return (script?.match(/bench\/[\w.-]+\.bench\.ts/g) ?? []).map((b) => `${dir}/${b}`);
    });

  it('names every benchmark file a package runs', () => {
    expect(run.length).toBeGreaterThan(10);
    expect(run.filter((f) => !doc.includes(`\`${f}\``))).toEqual([]);
  });

  it('names only benchmark files that exist and are run', () => {
    const named = [...doc.matchAll(/`([\w./-]+\.bench\.ts)`/g)].map((m) => m[1]!);
    expect(named.length).toBeGreaterThan(10);
    expect(named.filter((f) => !run.includes(f) || !existsSync(join(root, f)))).toEqual([]);
  });
});
