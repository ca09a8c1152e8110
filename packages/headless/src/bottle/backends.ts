import { BbError } from '@bb/errors';
import type { Backend } from '../engine/backend';
import { DockerBackend } from '../engine/docker-backend';
import { LocalBackend } from '../engine/local-backend';
import { type BottleRunner, type GateTokens, headlessRunner, type PoolSettings } from './runner';

/** How a named backend is made: from the environment, with a way to warn the operator. */
export type BackendFactory = (options: {
  env: Record<string, string | undefined>;
  warn?: (message: string) => void;
}) => Backend;

/** What a bottle platform's runner is made with, besides the environment. */
export interface RunnerOptions extends GateTokens {
  env: Record<string, string | undefined>;
  warn?: (message: string) => void;
  /** How long a bottle may stay warm after its turn (0: never; a platform may keep none). */
  warmMs: number;
  /** A warm pool to keep (`BB_POOL`): container backends keep one, a platform refuses it. */
  pool?: PoolSettings | undefined;
  /** Log lines of what the runner does in the background (its pool). */
  log?: ((entry: Record<string, unknown>) => void) | undefined;
}

/**
 * How a platform that runs bottles as groups of its own (pods on a cluster, not
 * containers on an engine) is made: the runner the orchestrator drives. It may
 * load its code on demand (a cluster client is heavy).
 */
export type RunnerFactory = (
  options: RunnerOptions,
) =>
  | (BottleRunner & { readonly isolates: boolean })
  | Promise<BottleRunner & { readonly isolates: boolean }>;

type Entry = { containers: BackendFactory } | { groups: RunnerFactory };

/**
 * Backends by name (`BB_BACKEND`, `--backend`); `backendKinds` is the process's
 * own. A backend is either an engine of single containers (`register`: the
 * bottles' groups are made of them by `headlessRunner`, and `bb run` can use it)
 * or a platform that runs whole bottles itself (`registerRunner`: the
 * orchestrator service only).
 */
export class BackendRegistry {
  readonly #made = new Map<string, Entry>();

  /** Add a container backend. Throws `CONFLICT` when another has its name. */
  register(name: string, factory: BackendFactory): void {
    this.#add(name, { containers: factory });
  }

  /** Add a platform that runs whole bottles. Throws `CONFLICT` when another has its name. */
  registerRunner(name: string, factory: RunnerFactory): void {
    this.#add(name, { groups: factory });
  }

  #add(name: string, entry: Entry): void {
    if (!/^[a-z][a-z0-9-]{0,30}$/.test(name))
      throw new BbError(
        'INVALID_INPUT',
        `backend name ${JSON.stringify(name)} must be lower-case letters, digits and dashes`,
      );
    const had = this.#made.get(name);
    const same =
      had &&
      ('containers' in had && 'containers' in entry
        ? had.containers === entry.containers
        : 'groups' in had && 'groups' in entry && had.groups === entry.groups);
    if (had && !same)
      throw new BbError('CONFLICT', `a backend named ${name} is registered already`);
    this.#made.set(name, entry);
  }

  names(): string[] {
    return [...this.#made.keys()].sort();
  }

  /** The name, checked: `INVALID_INPUT` naming the known ones when it is not one. */
  check(name: string, what = 'BB_BACKEND'): string {
    if (!this.#made.has(name))
      throw new BbError(
        'INVALID_INPUT',
        `${what} ${JSON.stringify(name)} is not a known backend: use one of ${this.names().join(', ')}, or register yours with registerBackend`,
      );
    return name;
  }

  /** Whether `name` is an engine of single containers (else a platform of whole bottles). */
  makesContainers(name: string): boolean {
    return 'containers' in this.#made.get(this.check(name))!;
  }

  /**
   * The container backend `name`. `INVALID_INPUT` for a platform that runs whole
   * bottles (it has no containers to hand out: use `runner`).
   */
  make(name: string, options: Parameters<BackendFactory>[0]): Backend {
    const entry = this.#made.get(this.check(name))!;
    if (!('containers' in entry))
      throw new BbError(
        'INVALID_INPUT',
        `backend ${name} runs whole bottles for the orchestrator service (bb orchestrate serve), not single containers: use docker or local here`,
      );
    return entry.containers(options);
  }

  /**
   * The runner the orchestrator drives bottles with on backend `name`: the
   * platform's own, or `headlessRunner` over the container backend (`backend`,
   * when one was made already: then `name` is not looked up).
   */
  async runner(
    name: string,
    options: RunnerOptions & { backend?: Backend | undefined },
  ): Promise<BottleRunner & { readonly isolates: boolean }> {
    const { backend: made, ...rest } = options;
    let backend = made;
    if (!backend) {
      const entry = this.#made.get(this.check(name))!;
      if ('groups' in entry) {
        if (rest.pool?.sizes.size)
          throw new BbError(
            'INVALID_INPUT',
            `BB_POOL keeps bottles ready on an engine of containers (docker); BB_BACKEND=${name} keeps none: unset BB_POOL`,
          );
        return entry.groups(rest);
      }
      backend = entry.containers(rest);
    }
    return Object.assign(
      headlessRunner({
        backend,
        env: rest.env,
        token: rest.token,
        credentials: rest.credentials,
        warmMs: rest.warmMs,
        warn: rest.warn,
        pool: rest.pool,
        log: rest.log,
      }),
      { isolates: backend.isolates },
    );
  }
}

export const backendKinds = new BackendRegistry();
backendKinds.register('docker', () => new DockerBackend());
backendKinds.register('local', ({ warn }) => new LocalBackend(warn ? { warn } : {}));

/** Make a backend known to this process (`BB_BACKEND` and `--backend` may then name it). */
export function registerBackend(name: string, factory: BackendFactory): void {
  backendKinds.register(name, factory);
}

/** Make a platform that runs whole bottles known to this process (`BB_BACKEND` may then name it). */
export function registerRunner(name: string, factory: RunnerFactory): void {
  backendKinds.registerRunner(name, factory);
}
