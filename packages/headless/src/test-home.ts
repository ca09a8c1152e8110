/**
 * A temporary `BB_HOME` with agent and bottle manifests, for tests, benchmarks
 * and demos: the one place they are written the way `loadAgentManifest` and
 * `loadBottleManifest` read them.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { homeLayout } from '@bb/names';
import { type BottlePaths, bottlePaths, type ForgeWiring, writeMeta } from './bottle/layout';
import { writeCurrentConfig } from './bottle/supervise-gate';

export interface TestHomeManifests {
  /** Agent manifests by name (`$BB_HOME/config/agents/<name>.json`). */
  agents?: Record<string, unknown>;
  /** Bottle manifests by name. @default `{ default: { image } }` when `image` is given */
  bottles?: Record<string, unknown>;
  /** The image of the default bottle, when `bottles` is not given. */
  image?: string;
}

/** Write (or overwrite) manifests into the home `home`. */
export function writeManifests(home: string, m: TestHomeManifests): void {
  const layout = homeLayout({ BB_HOME: home });
  const bottles = m.bottles ?? (m.image ? { default: { image: m.image } } : {});
  for (const [dir, manifests] of [
    [layout.agents, m.agents ?? {}],
    [layout.bottleManifests, bottles],
  ] as const) {
    mkdirSync(dir, { recursive: true });
    for (const [name, manifest] of Object.entries(manifests))
      writeFileSync(join(dir, `${name}.json`), JSON.stringify(manifest));
  }
}

/** A new temporary `BB_HOME` (its name starts with `prefix`) holding these manifests. */
export function makeTestHome(prefix: string, m: TestHomeManifests = {}): string {
  const home = mkdtempSync(join(tmpdir(), prefix));
  writeManifests(home, m);
  return home;
}

/** A script agent's manifest that follows these turns (each `{ steps }`). */
export function scriptAgent(
  turns: unknown[],
  o: { name?: string; email?: string } & Record<string, unknown> = {},
): Record<string, unknown> {
  const { name = 'Implementer', email, ...rest } = o;
  return {
    provider: 'script',
    git: { name, email: email ?? `${name.toLowerCase().replace(/\W+/g, '-')}@example.test` },
    ...rest,
    script: { turns },
  };
}

/** The script agent's steps that write one file, commit it and open a PR with it. */
export function prSteps(o: {
  path: string;
  content: string;
  message: string;
  title: string;
  body: string;
}): Array<Record<string, string>> {
  return [
    { do: 'write', path: o.path, content: o.content },
    { do: 'commit', message: o.message },
    { do: 'open_pr', title: o.title, body: o.body },
  ];
}

/** What {@link prTurn} does, around its PR. */
export interface PrTurnOptions {
  /** The PR's file, commit and text. @default fix.txt, "fixed", "Fix", "Fix it", "Done." */
  pr?: Partial<Parameters<typeof prSteps>[0]>;
  /** Steps after reading the issue, before the PR. */
  before?: unknown[];
  /** Steps after the PR, before its comment. */
  after?: unknown[];
  /** What it says on the issue, `null` for nothing. @default 'PR is up.' */
  comment?: string | null;
  /** @default 'Opened the PR.' */
  summary?: string;
}

/**
 * A script agent's turn that reads its issue, opens a PR changing one file, says
 * so on the issue and signals success.
 */
export function prTurn(o: PrTurnOptions = {}): { steps: unknown[] } {
  return {
    steps: [
      { do: 'read_issue' },
      ...(o.before ?? []),
      ...prSteps({
        path: 'fix.txt',
        content: 'fixed\n',
        message: 'Fix',
        title: 'Fix it',
        body: 'Done.',
        ...o.pr,
      }),
      ...(o.after ?? []),
      ...(o.comment === null ? [] : [{ do: 'comment', body: o.comment ?? 'PR is up.' }]),
      { do: 'done', status: 'success', summary: o.summary ?? 'Opened the PR.' },
    ],
  };
}

/** A script agent's turn that says which turn it is and the prompts it remembers. */
export function rememberTurn(summary = 'Answered.', after: unknown[] = []): { steps: unknown[] } {
  return {
    steps: [
      { do: 'comment', body: 'Turn {{turn}}: I remember "{{previousPrompts}}"' },
      ...after,
      { do: 'done', status: 'success', summary },
    ],
  };
}

/**
 * A frozen bottle on disk as a turn leaves one, with no container: its meta and
 * its current configuration (allowlist `allow`, no routes, a Dockerfile on
 * `image`). Its paths.
 */
export function writeFrozenBottle(
  home: string,
  slug: string,
  o: { allow?: string[]; image?: string; sessionId?: string; branch?: string } = {},
): BottlePaths {
  const env = { BB_HOME: home };
  const paths = bottlePaths(slug, env);
  const image = o.image ?? 'bb-base:latest';
  mkdirSync(paths.dir, { recursive: true });
  writeMeta(
    {
      slug,
      agent: 'impl',
      bottles: ['default'],
      backend: 'docker',
      image,
      status: 'frozen',
      sessionId: o.sessionId ?? 's1',
      cwd: '/workspace',
      branch: o.branch ?? 'bb/impl-1',
      forge: null,
      turns: [],
      createdAt: new Date().toISOString(),
    },
    env,
  );
  writeCurrentConfig(
    slug,
    {
      allowlist: `${JSON.stringify({ allow: o.allow ?? ['registry.npmjs.org'] })}\n`,
      routes: `${JSON.stringify({ routes: [] })}\n`,
      dockerfile: `FROM ${image}\n`,
    },
    env,
  );
  return paths;
}

/**
 * The forge wiring of a bottle for issue `issue` of `repo` (`owner/name`) on a
 * Gitea-compatible test server, with the bot's `token`.
 */
export function giteaWiring(
  server: { apiUrl: string; cloneUrl(repo: string): string },
  token: string,
  issue = 1,
  repo = 'acme/widgets',
): ForgeWiring {
  const [owner = '', name = ''] = repo.split('/');
  return {
    kind: 'gitea',
    site: { FORGE_GITEA_API: server.apiUrl },
    token,
    owner,
    repo: name,
    issue,
    cloneUrl: server.cloneUrl(repo),
  };
}
