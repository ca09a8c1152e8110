import { isBbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import { BackendRegistry, backendKinds, registerBackend } from '../src/backends';
import { LocalBackend } from '../src/local-backend';

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
    let msg = '';
    try {
      r.make('k8s', { env: {} });
    } catch (err) {
      expect(isBbError(err, 'INVALID_INPUT')).toBe(true);
      msg = (err as Error).message;
    }
    expect(msg).toMatch(/BB_BACKEND "k8s" is not a known backend: use one of docker/);
    expect(() => r.register('docker', () => new LocalBackend())).toThrow(/registered already/);
    expect(() => r.register('Not Ok', () => new LocalBackend())).toThrow(/lower-case/);
  });
});
