import { isBbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import {
  BackendRegistry,
  backendKinds,
  type RunnerOptions,
  registerBackend,
} from '../src/bottle/backends';
import type { BottleRunner } from '../src/bottle/runner';
import { hostBottleStorage } from '../src/bottle/storage';
import { LocalBackend } from '../src/engine/local-backend';

/** What `fn` throws, which must be INVALID_INPUT: its message. */
function invalidInput(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(isBbError(err, 'INVALID_INPUT')).toBe(true);
    return (err as Error).message;
  }
  throw new Error('it threw nothing');
}

describe('backends by name', () => {
  it('knows docker and local, and makes a registered one by its name', () => {
    expect(backendKinds.names()).toEqual(expect.arrayContaining(['docker', 'local']));
    const warned: string[] = [];
    const local = backendKinds.make('local', { env: {}, warn: (m) => warned.push(m) });
    expect(local.name).toBe('local');
    const made: Array<Record<string, string | undefined>> = [];
    registerBackend('my-engine', ({ env }) => {
      made.push(env);
      return new LocalBackend({ warn: () => {} });
    });
    backendKinds.make('my-engine', { env: { MY_ENGINE_URL: 'unix:///x' } });
    expect(made).toEqual([{ MY_ENGINE_URL: 'unix:///x' }]);
  });

  it('names the known backends for an unknown one, and refuses a second under a taken name', () => {
    const r = new BackendRegistry();
    r.register('docker', () => new LocalBackend());
    const msg = invalidInput(() => r.make('k8s', { env: {} }));
    expect(msg).toMatch(/BB_BACKEND "k8s" is not a known backend: use one of docker/);
    expect(() => r.register('docker', () => new LocalBackend())).toThrow(/registered already/);
    expect(() => r.register('Not Ok', () => new LocalBackend())).toThrow(/lower-case/);
  });
});

describe('platforms that run whole bottles', () => {
  const platform = (name: string): BottleRunner & { isolates: true } => ({
    ...({} as BottleRunner),
    backendName: name,
    isolates: true,
    storage: hostBottleStorage({ BB_HOME: '/nonexistent' }),
  });

  it("gives the orchestrator a platform's own runner, and a container backend's through headlessRunner", async () => {
    const r = new BackendRegistry();
    r.register('engine', () => new LocalBackend({ warn: () => {} }));
    const seen: RunnerOptions[] = [];
    r.registerRunner('cluster', async (o) => {
      seen.push(o);
      return platform('cluster');
    });
    const options = { env: { BB_HOME: '/x' }, token: 't', warmMs: 0 };
    const cluster = await r.runner('cluster', options);
    expect([cluster.backendName, cluster.isolates]).toEqual(['cluster', true]);
    expect(seen).toEqual([options]);
    const engine = await r.runner('engine', options);
    // A container backend's bottles are groups made by headlessRunner; local isolates nothing.
    expect([engine.backendName, engine.isolates]).toEqual(['local', false]);
    expect(typeof engine.startLaunch).toBe('function');
    expect([r.makesContainers('engine'), r.makesContainers('cluster')]).toEqual([true, false]);
  });

  it('refuses a platform where single containers are wanted, saying where it runs, and a taken name', () => {
    const r = new BackendRegistry();
    const make = () => platform('cluster');
    r.registerRunner('cluster', make);
    r.registerRunner('cluster', make);
    const msg = invalidInput(() => r.make('cluster', { env: {} }));
    expect(msg).toMatch(
      /backend cluster runs whole bottles .*bb orchestrate serve.*use docker or local/,
    );
    expect(() => r.register('cluster', () => new LocalBackend())).toThrow(/registered already/);
    expect(() => r.registerRunner('cluster', () => platform('other'))).toThrow(
      /registered already/,
    );
  });
});
