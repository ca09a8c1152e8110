import type { QueueEventType } from '@bb/forge-sidecar';
import { afterEach, describe, expect } from 'vitest';
import { suiteTest } from '../suite-test';
import type { BottleStorage } from './storage';

/** A storage, and how its bottles come to hold what gates and headless write. */
export interface BottleStorageWorld {
  storage: BottleStorage;
  /** Make bottle `slug` exist, recorded as headless records it (`agent` named). */
  addBottle(slug: string, agent: string): Promise<void> | void;
  /** Queue an event as the bottle's gate does. */
  queue(slug: string, type: QueueEventType, data: Record<string, unknown>): Promise<void> | void;
  /** Log one forge operation as the bottle's gate does. */
  logOperation(slug: string): Promise<void> | void;
  dispose?(): Promise<void> | void;
}

export interface BottleStorageConformanceOptions {
  create(): Promise<BottleStorageWorld> | BottleStorageWorld;
  skip?: { reason: string; tests: string[] };
}

/**
 * The behaviour every `BottleStorage` must have, whatever keeps the bottles
 * (the host's disk, a cluster's volumes, a remote store): every answer a
 * promise; meta as recorded; notes whole, per bottle, by a checked name; each
 * queued event taken once, oldest first, and kept when taking it failed; the
 * gate's operations seen; a turn's evidence named.
 */
export function describeBottleStorageConformance(
  name: string,
  options: BottleStorageConformanceOptions,
): void {
  describe(`BottleStorage conformance: ${name}`, () => {
    let current: BottleStorageWorld | undefined;
    afterEach(async () => {
      await current?.dispose?.();
      current = undefined;
    });
    const make = async () => {
      current = await options.create();
      return current;
    };
    const test = suiteTest(options.skip, 30_000);

    test('every answer is a promise (a storage behind a network is used the same way)', async () => {
      const { storage, addBottle } = await make();
      await addBottle('st-a', 'agent');
      const answers = [
        storage.meta('st-a'),
        storage.hasOperations('st-a'),
        storage.readNote('st-a', 'turn'),
        storage.writeNote('st-a', 'turn', '{}'),
        storage.evidence('st-a'),
        storage.drainQueue('st-a', () => {}),
      ];
      for (const a of answers) expect(typeof (a as Promise<unknown>)?.then).toBe('function');
      await Promise.all(answers);
      await storage.removeNote('st-a', 'turn');
    });

    test('meta is what was recorded, and nothing for a bottle that is not there', async () => {
      const { storage, addBottle } = await make();
      expect(await storage.meta('st-a')).toBeUndefined();
      await addBottle('st-a', 'implementer');
      expect(await storage.meta('st-a')).toMatchObject({ slug: 'st-a', agent: 'implementer' });
      expect(await storage.meta('st-b')).toBeUndefined();
    });

    test('notes are kept whole, per bottle, by a checked name, and forgotten', async () => {
      const { storage, addBottle } = await make();
      await addBottle('st-a', 'agent');
      await addBottle('st-b', 'agent');
      expect(await storage.readNote('st-a', 'turn')).toBeUndefined();
      await storage.writeNote('st-a', 'turn', '{"done":null}');
      await storage.writeNote('st-a', 'turn', '{"done":{"status":"success"}}');
      expect(await storage.readNote('st-a', 'turn')).toBe('{"done":{"status":"success"}}');
      expect(await storage.readNote('st-b', 'turn'), "another bottle's note").toBeUndefined();
      await storage.removeNote('st-a', 'turn');
      expect(await storage.readNote('st-a', 'turn')).toBeUndefined();
      await storage.removeNote('st-a', 'turn');
      for (const bad of ['../meta', 'a/b', 'Turn', '', '.hidden']) {
        let refused = false;
        try {
          await storage.writeNote('st-a', bad, 'x');
        } catch {
          refused = true;
        }
        expect(refused, `note name ${JSON.stringify(bad)}`).toBe(true);
      }
    });

    test('each queued event is taken once, oldest first; one whose taking failed stays', async () => {
      const { storage, addBottle, queue } = await make();
      await addBottle('st-a', 'agent');
      await queue('st-a', 'op', { method: 'open_pr', prNumber: 4 });
      await queue('st-a', 'done', { status: 'success', summary: 's' });
      const seen: string[] = [];
      await expect(
        storage.drainQueue('st-a', (e) => {
          if (e.type === 'done' && !seen.includes('failed')) {
            seen.push('failed');
            throw new Error('the record could not be written');
          }
          seen.push(e.type);
        }),
      ).rejects.toThrow(/could not be written/);
      await storage.drainQueue('st-a', async (e) => {
        await new Promise((r) => setTimeout(r, 1));
        seen.push(e.type);
      });
      await storage.drainQueue('st-a', (e) => {
        seen.push(e.type);
      });
      expect(seen).toEqual(['op', 'failed', 'done']);
    });

    test("sees the gate's operations", async () => {
      const { storage, addBottle, logOperation } = await make();
      await addBottle('st-a', 'agent');
      expect(await storage.hasOperations('st-a')).toBe(false);
      await logOperation('st-a');
      expect(await storage.hasOperations('st-a')).toBe(true);
    });

    test("names a turn's evidence: its logs, the gate's push repository and where commits are", async () => {
      const { storage, addBottle } = await make();
      await addBottle('st-a', 'agent');
      const e = await storage.evidence('st-a');
      expect(typeof e.dir).toBe('string');
      expect(typeof e.pushRepo).toBe('string');
      expect(e.objectDirs.length).toBeGreaterThan(0);
    });
  });
}
