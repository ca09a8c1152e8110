/**
 * A plan on this host's engine (Docker, or local processes): the plan of a
 * bottle's turn from its manifests, approvals and policy, its mounts' roles as
 * the bottle's host paths, its secret references as values.
 */
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { loadPolicy } from '@bb/supervise';
import type { Backend, BottleSpec } from '../engine/backend';
import { bbHome } from '../home';
import { providerFor } from '../providers';
import { type BottleMeta, type BottlePaths, bottlePaths, pathsFor } from './layout';
import type { AgentManifest, BottleManifest } from './manifests';
import {
  type BottlePlan,
  type InsidePaths,
  type MountRole,
  type PlannedMount,
  planBottle,
  type SecretRef,
} from './plan';
import { secretsDir } from './secrets';
import { allowedBases, effectiveConfig } from './supervise-gate';

/** Whether bottles get a supervise sidecar (`BB_SUPERVISE=off` turns it off). */
export const supervises = (env: Record<string, string | undefined>) =>
  env['BB_SUPERVISE'] !== 'off';

/** Where a bottle's processes see its parts on `backend`: fixed paths in a container, the host's otherwise. */
export function insideFor(
  backend: Backend,
  p: BottlePaths,
  runtime: string,
  slug: string,
  env: Record<string, string | undefined>,
): InsidePaths {
  return pathsFor(backend, p, runtime, secretsDir(slug, 'gate', env));
}

/**
 * The plan of a bottle's next turn on this host: its manifests' configuration
 * with what an operator approved in its place, the supervise policy, the paths
 * its containers see.
 */
export function hostPlan(
  meta: BottleMeta,
  agent: AgentManifest,
  bottles: BottleManifest[],
  prompt: string,
  o: {
    backend: Backend;
    runtime: string;
    env: Record<string, string | undefined>;
    forgeToken: boolean;
    /** A warm bottle: its waiter reads each turn's command from `turns`. */
    waiter?: boolean;
  },
): BottlePlan {
  const { backend, env } = o;
  const policy = supervises(env) ? loadPolicy(bbHome(env)) : undefined;
  return planBottle({
    meta,
    agent,
    provider: providerFor(agent.provider),
    bottles,
    prompt,
    config: effectiveConfig(meta, bottles, env),
    inside: insideFor(backend, bottlePaths(meta.slug, env), o.runtime, meta.slug, env),
    forgeToken: o.forgeToken,
    supervise: policy
      ? {
          allowedBases: allowedBases(meta, env),
          ttlMs: policy.ttlMs,
          waitMs: policy.waitMs,
          coolDownAfter: policy.coolDownAfter,
          coolDownMs: policy.coolDownMs,
        }
      : undefined,
    sharedSockets: backend.mapsMounts,
    isolated: backend.isolates,
    mirror: !!meta.mirror && backend.mapsMounts,
    turns: !!o.waiter,
  });
}

/** Each mount role's host path for a bottle. */
export function hostSources(
  p: BottlePaths,
  runtime: string,
  meta: Pick<BottleMeta, 'slug' | 'mirror'>,
  env: Record<string, string | undefined>,
): Record<MountRole, string | undefined> {
  return {
    runtime,
    sockets: p.sock,
    workspace: p.workspace,
    home: p.home,
    currentConfig: p.currentConfig,
    mirror: meta.mirror ? join(meta.mirror, 'objects') : undefined,
    turns: p.turns,
    secrets: secretsDir(meta.slug, 'gate', env),
    queue: p.queue,
    state: p.state,
    supervise: p.supervise,
    proxy: p.proxy,
  };
}

/** A plan's mounts as the engine's: each role at its host path. */
export function hostMounts(
  planned: PlannedMount[],
  sources: Partial<Record<MountRole, string | undefined>>,
): BottleSpec['mounts'] {
  return planned.map((m) => {
    const source = sources[m.role];
    if (!source)
      throw new BbError('INTERNAL', `the plan mounts ${m.role}, which this bottle has no path for`);
    return { source, target: m.target, ...(m.readOnly ? { readOnly: true } : {}) };
  });
}

/** A secret reference's value. */
export function secretValue(
  ref: SecretRef,
  token: string | undefined,
  resolveRoutes: (routes: string) => Record<string, string>,
): string {
  if (ref.from === 'forge-token') {
    if (!token)
      throw new BbError('INVALID_INPUT', 'a forge bottle needs the forge token to start its gate');
    return token;
  }
  return JSON.stringify(resolveRoutes(ref.routes));
}
