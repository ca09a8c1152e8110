// The layout holds: no import cycle inside a package's source, none between
// packages, headless's layers import downward only, and no source file past 500
// lines unless it is listed here with why it is one concern.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '..', '..');
// Packages are the folders with a package.json (a build may leave a scratch folder a moment).
const packageDirs = ['packages', 'apps'].flatMap((d) =>
  readdirSync(join(root, d))
    .map((p) => join(root, d, p))
    .filter((p) => existsSync(join(p, 'package.json'))),
);

function sources(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const f of readdirSync(d)) {
      const p = join(d, f);
      if (statSync(p).isDirectory()) walk(p);
      else if (/\.tsx?$/.test(f) && !/\.test\.tsx?$/.test(f)) out.push(p);
    }
  };
  if (existsSync(dir)) walk(dir);
  return out;
}

/** A cycle in `graph`, as the nodes around it, or none. */
function cycles(graph: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const seen = new Set<string>();
  const onStack: string[] = [];
  const visit = (n: string) => {
    seen.add(n);
    onStack.push(n);
    for (const m of graph.get(n) ?? []) {
      const at = onStack.indexOf(m);
      if (at !== -1) found.push([...onStack.slice(at), m]);
      else if (!seen.has(m)) visit(m);
    }
    onStack.pop();
  };
  for (const n of graph.keys()) if (!seen.has(n)) visit(n);
  return found;
}

/** Files past 500 lines that stay whole, and why each is one concern. */
const LONG: Record<string, string> = {
  'packages/forge/src/testing/gitea-server/world.ts':
    "the Gitea-compatible test double's world: its model and each change to it with the webhooks Gitea sends (the HTTP side is server.ts, the endpoints the route table in routes.ts)",
  'packages/wall/src/git.ts':
    'git across the wall: every host-side git run on agent data, kept together so its rules are read at once',
  'packages/lifecycle/src/fleet.ts':
    'one orchestrator among several: its leases, take-overs, the shared inbox, letting an issue go',
  'packages/egress/src/egress-connection.ts':
    'one egress connection: CONNECT, TLS peeking and relaying',
  'packages/forklift/src/run.ts': "forklift's one run, from fork to verified PR",
  'packages/headless/src/engine/docker-backend.ts': 'the Docker backend: one engine, its calls',
  'packages/supervise/src/desk.ts': "the operator's desk: decide, apply, audit",
};

describe('the layout', () => {
  it('no import cycle inside any package', () => {
    const graph = new Map<string, string[]>();
    for (const dir of packageDirs) {
      const files = new Set(sources(join(dir, 'src')));
      const resolveIn = (from: string, spec: string) => {
        const b = resolve(dirname(from), spec);
        return [b, `${b}.ts`, `${b}.tsx`, join(b, 'index.ts')].find((c) => files.has(c));
      };
      for (const f of files) {
        const text = readFileSync(f, 'utf8');
        const to: string[] = [];
        for (const m of text.matchAll(/^(?:import|export)\s+(type\s+)?[^;]*?from\s+'(\.[^']+)'/gms))
          if (!m[1]) to.push(resolveIn(f, m[2]!) ?? '');
        for (const m of text.matchAll(/import\('(\.[^']+)'\)/g)) to.push(resolveIn(f, m[1]!) ?? '');
        graph.set(
          relative(root, f),
          to.filter(Boolean).map((t) => relative(root, t)),
        );
      }
    }
    expect(graph.size).toBeGreaterThan(100);
    expect(cycles(graph)).toEqual([]);
  });

  it("headless's layers import downward only: the engine and the providers know nothing of bottles, nor of each other", () => {
    const src = join(root, 'packages', 'headless', 'src');
    /** What each layer may import besides itself (the root's leaves are everyone's). */
    const may: Record<string, string[]> = {
      engine: [],
      providers: [],
      bottle: ['engine', 'providers'],
    };
    const leaves = new Set(['home.ts', 'suite-test.ts']);
    const wrong: string[] = [];
    for (const layer of Object.keys(may)) {
      const files = sources(join(src, layer));
      expect(files.length, layer).toBeGreaterThan(3);
      for (const f of files)
        for (const m of readFileSync(f, 'utf8').matchAll(/from\s+'(\.[^']+)'/g)) {
          const to = relative(src, resolve(dirname(f), m[1]!));
          if (to.startsWith('..')) continue; // the package.json
          const top = to.split('/')[0]!;
          if (
            top === layer ||
            may[layer]!.includes(top) ||
            leaves.has(`${top}.ts`) ||
            leaves.has(top)
          )
            continue;
          wrong.push(`${relative(src, f)} imports ${to}`);
        }
    }
    expect(wrong).toEqual([]);
  });

  it('no cycle between packages', () => {
    const graph = new Map<string, string[]>();
    for (const dir of packageDirs) {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
        name: string;
        dependencies?: Record<string, string>;
      };
      graph.set(
        pkg.name,
        Object.keys(pkg.dependencies ?? {}).filter((d) => d.startsWith('@bb/')),
      );
    }
    expect(cycles(graph)).toEqual([]);
  });

  it('no source file past 500 lines, but the ones listed with their reason', () => {
    const long = packageDirs
      .flatMap((d) => sources(join(d, 'src')))
      .filter((f) => readFileSync(f, 'utf8').split('\n').length > 500)
      .map((f) => relative(root, f))
      .sort();
    expect(long).toEqual(
      Object.keys(LONG)
        .filter((f) => long.includes(f))
        .sort(),
    );
    // A listed file that shrank is taken off the list.
    expect(Object.keys(LONG).sort()).toEqual(long);
  });
});
