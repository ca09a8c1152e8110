/**
 * @module
 * `@bb/headless/testing`: the behaviour suite every `Backend` must pass
 * (`describeBackendConformance`), the isolation suite every backend that
 * says it isolates must pass too (`describeIsolationConformance`), and the
 * suite every `BottleRunner` must pass, a platform's own or `headlessRunner`
 * over an engine (`describeRunnerConformance`), and the suite every agent
 * provider must pass (`describeProviderConformance`).
 *
 * ```ts
 * describeBackendConformance('my backend', { create: () => new MyBackend(), image: 'bb-base:latest' });
 * ```
 * Commands run with `sh -c`, so the image needs a POSIX shell.
 */
import { randomUUID } from 'node:crypto';
import { settledCode as code } from '@bb/errors';
import { LABEL } from '@bb/names';
import { afterEach, describe, expect } from 'vitest';
import type { Backend, BottleSpec } from './engine/backend';
import { suiteTest } from './suite-test';

export { describeRunnerConformance, type RunnerConformanceOptions } from './bottle/runner-suite';
export {
  type BottleStorageConformanceOptions,
  type BottleStorageWorld,
  describeBottleStorageConformance,
} from './bottle/storage-suite';
export {
  describeIsolationConformance,
  type IsolationConformanceOptions,
} from './engine/isolation-suite';
export {
  describeProviderConformance,
  type ProviderConformanceOptions,
} from './providers/suite';
export {
  giteaWiring,
  makeTestHome,
  type PrTurnOptions,
  prSteps,
  prTurn,
  rememberTurn,
  scriptAgent,
  type TestHomeManifests,
  writeFrozenBottle,
  writeManifests,
} from './test-home';

export interface BackendConformanceOptions {
  create: () => Backend | Promise<Backend>;
  /** An image with `sh` (ignored by backends without images). */
  image: string;
  skip?: { reason: string; tests: string[] };
}

export function describeBackendConformance(name: string, options: BackendConformanceOptions): void {
  describe(`Backend conformance: ${name}`, () => {
    const made: Array<{ backend: Backend; id: string }> = [];
    afterEach(async () => {
      for (const m of made.splice(0)) await m.backend.destroy(m.id).catch(() => {});
    });
    const test = suiteTest(options.skip, 30_000);
    const spec = (script: string, over: Partial<BottleSpec> = {}): BottleSpec => {
      const slug = `conf-${randomUUID().slice(0, 8)}`;
      return {
        name: `bb-${slug}-agent`,
        image: options.image,
        cmd: ['sh', '-c', script],
        labels: { [LABEL.slug]: slug, [LABEL.role]: 'agent' },
        network: 'none',
        ...over,
      };
    };
    const run = async (backend: Backend, s: BottleSpec) => {
      const id = await backend.create(s);
      made.push({ backend, id });
      return id;
    };

    test('runs a command and reports its exit code', async () => {
      const b = await options.create();
      const id = await run(b, spec('exit 7'));
      expect((await b.inspect(id))?.state).toBe('created');
      await b.start(id);
      expect((await b.wait(id)).exitCode).toBe(7);
      const info = await b.inspect(id);
      expect(info).toMatchObject({ state: 'exited', exitCode: 7, oomKilled: false });
    });

    test('captures stdout and stderr, and passes the environment', async () => {
      const b = await options.create();
      const id = await run(
        b,
        spec('echo "out $GREETING"; echo err >&2', { env: { GREETING: 'hello' } }),
      );
      await b.start(id);
      await b.wait(id);
      const logs = await b.logs(id);
      expect(logs).toContain('out hello');
      expect(logs).toContain('err');
    });

    test('logs since a moment hold only what was written from then on', async () => {
      const b = await options.create();
      const id = await run(b, spec('echo before; sleep 1.5; echo after'));
      await b.start(id);
      await new Promise((r) => setTimeout(r, 700));
      const mid = Date.now();
      await b.wait(id);
      expect(await b.logs(id)).toContain('before');
      const later = await b.logs(id, { sinceMs: mid });
      expect(later).toContain('after');
      expect(later).not.toContain('before');
    });

    test("counts a bottle's processes from outside, paused or running", async () => {
      const b = await options.create();
      if (!b.processes) throw new Error(`backend ${b.name} cannot count a bottle's processes`);
      const id = await run(b, spec('sleep 30 & sleep 30 & wait'));
      await b.start(id);
      // The shell and its two children, once both are up.
      let n = 0;
      for (let i = 0; i < 100 && n < 3; i++) {
        n = await b.processes(id);
        if (n < 3) await new Promise((r) => setTimeout(r, 50));
      }
      expect(n).toBe(3);
      await b.freeze(id);
      expect(await b.processes(id)).toBe(3);
      await b.destroy(id);
    });

    test('labels bottles and lists them by label, with the version label added', async () => {
      const b = await options.create();
      const s = spec('exit 0');
      const id = await run(b, s);
      const other = await run(b, spec('exit 0'));
      const found = await b.list({ [LABEL.slug]: s.labels[LABEL.slug]! });
      expect(found.map((f) => f.id)).toEqual([id]);
      expect(found[0]!.labels).toMatchObject({
        [LABEL.slug]: s.labels[LABEL.slug],
        [LABEL.role]: 'agent',
      });
      expect(found[0]!.labels[LABEL.version]).toMatch(/^\d+\.\d+\.\d+/);
      expect((await b.list({ [LABEL.role]: 'agent' })).map((f) => f.id)).toEqual(
        expect.arrayContaining([id, other]),
      );
    });

    test('freezes and rehydrates a running bottle, then stops it', async () => {
      const b = await options.create();
      const id = await run(b, spec('sleep 30'));
      await b.start(id);
      await b.freeze(id);
      expect((await b.inspect(id))?.state).toBe('paused');
      await b.rehydrate(id);
      expect((await b.inspect(id))?.state).toBe('running');
      const t0 = Date.now();
      await b.stop(id, 2000);
      expect(Date.now() - t0).toBeLessThan(15_000);
      expect((await b.inspect(id))?.state).toBe('exited');
    });

    test('destroy removes the bottle and is idempotent; missing bottles are NOT_FOUND', async () => {
      const b = await options.create();
      const id = await run(b, spec('sleep 30'));
      await b.start(id);
      await b.destroy(id);
      expect(await b.inspect(id)).toBeUndefined();
      await b.destroy(id);
      expect(await code(b.start(id))).toBe('NOT_FOUND');
      expect(await code(b.logs(id))).toBe('NOT_FOUND');
      expect(await b.list({ [LABEL.slug]: 'no-such-slug' })).toEqual([]);
    });

    test('a name already in use is a CONFLICT; a spec without bb labels is INVALID_INPUT', async () => {
      const b = await options.create();
      const s = spec('exit 0');
      await run(b, s);
      expect(await code(b.create({ ...s }))).toBe('CONFLICT');
      expect(await code(b.create({ ...spec('exit 0'), labels: {} }))).toBe('INVALID_INPUT');
    });
  });
}
