import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { loadPolicy } from '@bb/supervise';
import { writeFileNoFollow } from '@bb/wall';
import { bbHome } from '../home';
import { type BottleMeta, bottlePaths } from './layout';
import type { BottleManifest } from './manifests';

/** The three files a bottle runs with, as text: what the agent reads and proposes against. */
export interface BottleConfig {
  /** `{ "routes": [...] }`: credential routes, secret references only. */
  routes: string;
  /** `{ "allow": [...] }`: the egress allowlist. */
  allowlist: string;
  /** The Dockerfile of the agent's image (`FROM <image>` when the bottle names an image). */
  dockerfile: string;
}

const FILES: Record<keyof BottleConfig, string> = {
  routes: 'routes.json',
  allowlist: 'allowlist.json',
  dockerfile: 'Dockerfile',
};

/**
 * The configuration a bottle runs with this turn: the manifests', with what an
 * operator approved for the whole bottle (`overrides/`) in their place.
 */
export function effectiveConfig(
  meta: BottleMeta,
  bottles: BottleManifest[],
  env: Record<string, string | undefined>,
): BottleConfig {
  const p = bottlePaths(meta.slug, env);
  const override = (k: keyof BottleConfig) => {
    const f = join(p.overrides, FILES[k]);
    return existsSync(f) ? readFileSync(f, 'utf8') : undefined;
  };
  const credentials = bottles.flatMap((b) => b.credentials);
  const allow = [...new Set(bottles.flatMap((b) => b.egress.allow))];
  return {
    routes:
      override('routes') ??
      `${JSON.stringify(
        {
          routes: credentials.map((c) => ({
            prefix: c.route,
            upstream: c.upstream,
            headers: c.headers,
          })),
        },
        null,
        2,
      )}\n`,
    allowlist: override('allowlist') ?? `${JSON.stringify({ allow }, null, 2)}\n`,
    dockerfile: override('dockerfile') ?? bottles[0]?.dockerfile ?? `FROM ${meta.image}\n`,
  };
}

/** Write the files the agent reads at /etc/bot-bottle/current-config (host-owned, read-only to it). */
export function writeCurrentConfig(
  slug: string,
  cfg: BottleConfig,
  env: Record<string, string | undefined>,
): void {
  const dir = bottlePaths(slug, env).currentConfig;
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  for (const k of Object.keys(FILES) as Array<keyof BottleConfig>)
    atomicWrite(join(dir, FILES[k]), cfg[k]);
}

/**
 * Why the bottle's gate and its agent are not on exactly `cfg` (its manifests
 * plus its persisted overrides), or undefined when they are. A turn-scoped
 * approval changes `current-config` and the proxies' files (and the gate's
 * tables, through a reload) for its turn only: such a bottle may not serve a
 * next turn from the same gate (I9).
 */
export function grantDrift(
  slug: string,
  cfg: BottleConfig,
  proxies: boolean,
  env: Record<string, string | undefined>,
): string | undefined {
  const p = bottlePaths(slug, env);
  const read = (dir: string, file: string) => {
    try {
      return readFileSync(join(dir, file), 'utf8');
    } catch {
      return undefined;
    }
  };
  for (const k of Object.keys(FILES) as Array<keyof BottleConfig>) {
    const now = read(p.currentConfig, FILES[k]);
    if (now !== undefined && now !== cfg[k])
      return `its ${FILES[k]} holds what was approved for its last turn only`;
  }
  if (proxies)
    for (const [file, want] of [
      ['rules.json', cfg.allowlist],
      ['routes.json', cfg.routes],
    ] as const) {
      const now = read(p.proxy, file);
      if (now !== undefined && now !== want)
        return `its proxies serve what was approved for its last turn only (${file})`;
    }
  return undefined;
}

/** Keep a file an operator approved for the whole bottle (later turns run with it). */
export function writeOverride(
  slug: string,
  kind: keyof BottleConfig,
  text: string,
  env: Record<string, string | undefined>,
): void {
  const dir = bottlePaths(slug, env).overrides;
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  atomicWrite(join(dir, FILES[kind]), text);
}

/** Write a host-owned file whole (beside it, then renamed), following no link on the way. */
export function atomicWrite(file: string, content: string, mode = 0o644): void {
  writeFileNoFollow(dirname(file), basename(file), content, { mode, createDirs: false });
}

/** Images a proposed Dockerfile may start from: the bottle's first image and the operator's list. */
export function allowedBases(meta: BottleMeta, env: Record<string, string | undefined>): string[] {
  const policy = loadPolicy(bbHome(env));
  return [...new Set([meta.baseImage ?? meta.image, ...policy.baseImages])];
}
