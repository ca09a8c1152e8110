import { BbError } from '@bb/errors';
import type { Backend } from './backend';
import { DockerBackend } from './docker-backend';
import { LocalBackend } from './local-backend';

/** How a named backend is made: from the environment, with a way to warn the operator. */
export type BackendFactory = (options: {
  env: Record<string, string | undefined>;
  warn?: (message: string) => void;
}) => Backend;

/** Backends by name (`BB_BACKEND`, `--backend`); `backendKinds` is the process's own. */
export class BackendRegistry {
  readonly #made = new Map<string, BackendFactory>();

  /** Add a backend. Throws `CONFLICT` when another has its name. */
  register(name: string, factory: BackendFactory): void {
    if (!/^[a-z][a-z0-9-]{0,30}$/.test(name))
      throw new BbError(
        'INVALID_INPUT',
        `backend name ${JSON.stringify(name)} must be lower-case letters, digits and dashes`,
      );
    const had = this.#made.get(name);
    if (had && had !== factory)
      throw new BbError('CONFLICT', `a backend named ${name} is registered already`);
    this.#made.set(name, factory);
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

  make(name: string, options: Parameters<BackendFactory>[0]): Backend {
    return this.#made.get(this.check(name))!(options);
  }
}

export const backendKinds = new BackendRegistry();
backendKinds.register('docker', () => new DockerBackend());
backendKinds.register('local', ({ warn }) => new LocalBackend(warn ? { warn } : {}));

/** Make a backend known to this process (`BB_BACKEND` and `--backend` may then name it). */
export function registerBackend(name: string, factory: BackendFactory): void {
  backendKinds.register(name, factory);
}
