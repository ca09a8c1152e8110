// The host's bottle storage: how the orchestrator reads a bottle (meta, the gate's
// queue and op log, its own notes, a turn's evidence) without knowing its paths.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { QueueWriter } from '@bb/forge-sidecar';
import { afterEach, describe, expect, it } from 'vitest';
import { type BottleMeta, bottlePaths, writeMeta } from '../src/bottle/layout';
import { hostBottleStorage } from '../src/bottle/storage';
import { describeBottleStorageConformance } from '../src/bottle/storage-suite';

const homes: string[] = [];
afterEach(() => {
  for (const h of homes.splice(0)) rmSync(h, { recursive: true, force: true });
});

function bottle(slug = 'impl-1') {
  const home = mkdtempSync(join(tmpdir(), 'bb-storage-'));
  homes.push(home);
  const env = { BB_HOME: home };
  const p = bottlePaths(slug, env);
  for (const d of [p.dir, p.queue, p.state, p.sock]) mkdirSync(d, { recursive: true });
  return { env, p, slug, storage: hostBottleStorage(env) };
}

describeBottleStorageConformance('hostBottleStorage', {
  create: () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-storage-'));
    homes.push(home);
    const env = { BB_HOME: home };
    const dirs = (slug: string) => {
      const p = bottlePaths(slug, env);
      for (const d of [p.dir, p.queue, p.state, p.sock]) mkdirSync(d, { recursive: true });
      return p;
    };
    const writers = new Map<string, QueueWriter>();
    return {
      storage: hostBottleStorage(env),
      addBottle: (slug, agent) => {
        dirs(slug);
        writeMeta({ slug, agent, turns: [] } as unknown as BottleMeta, env);
      },
      queue: (slug, type, data) => {
        const w = writers.get(slug) ?? new QueueWriter(dirs(slug).queue, slug);
        writers.set(slug, w);
        w.write(type, data);
      },
      logOperation: (slug) =>
        writeFileSync(join(dirs(slug).state, 'ops.jsonl'), '{"method":"read_issue"}\n'),
    };
  },
});

describe('hostBottleStorage', () => {
  it("reads the bottle's meta, and nothing for a bottle that is not there", async () => {
    const { env, slug, storage } = bottle();
    expect(await storage.meta(slug)).toBeUndefined();
    const meta = { slug, agent: 'a', turns: [], mirror: '/m.git' } as unknown as BottleMeta;
    writeMeta(meta, env);
    expect(await storage.meta(slug)).toMatchObject({ slug, agent: 'a' });
    expect(await storage.meta('other')).toBeUndefined();
  });

  it('takes each queued event once, oldest first', async () => {
    const { p, slug, storage } = bottle();
    const q = new QueueWriter(p.queue, slug);
    q.write('op', { method: 'open_pr', prNumber: 4 });
    q.write('done', { status: 'success', summary: 's' });
    const seen: string[] = [];
    await storage.drainQueue(slug, (e) => {
      seen.push(e.type);
    });
    expect(seen).toEqual(['op', 'done']);
    await storage.drainQueue(slug, (e) => {
      seen.push(e.type);
    });
    expect(seen).toEqual(['op', 'done']);
  });

  it('keeps notes whole, by a checked name, and forgets them', async () => {
    const { slug, storage } = bottle();
    expect(await storage.readNote(slug, 'turn')).toBeUndefined();
    await storage.writeNote(slug, 'turn', '{"done":null}');
    await storage.writeNote(slug, 'turn', '{"done":{"status":"success"}}');
    expect(await storage.readNote(slug, 'turn')).toBe('{"done":{"status":"success"}}');
    await storage.removeNote(slug, 'turn');
    expect(await storage.readNote(slug, 'turn')).toBeUndefined();
    for (const bad of ['../meta', 'a/b', 'Turn', ''])
      await expect(storage.writeNote(slug, bad, 'x')).rejects.toThrow(/note name/);
  });

  it('says whether the gate logged anything and listens, and where the evidence is', async () => {
    const { env, p, slug, storage } = bottle();
    expect(await storage.hasOperations(slug)).toBe(false);
    writeFileSync(join(p.state, 'ops.jsonl'), '');
    expect(await storage.hasOperations(slug)).toBe(false);
    writeFileSync(join(p.state, 'ops.jsonl'), '{"method":"read_issue"}\n');
    expect(await storage.hasOperations(slug)).toBe(true);
    expect(await storage.gateListening?.(slug)).toBe(false);
    symlinkSync('/nonexistent', join(p.sock, 'forge.sock'));
    expect(await storage.gateListening?.(slug)).toBe(false);
    rmSync(join(p.sock, 'forge.sock'));
    writeFileSync(join(p.sock, 'forge.sock'), '');
    expect(await storage.gateListening?.(slug)).toBe(true);
    writeMeta({ slug, turns: [], mirror: '/mirrors/r.git' } as unknown as BottleMeta, env);
    expect(await storage.evidence(slug)).toEqual({
      dir: p.dir,
      pushRepo: join(p.state, 'push.git'),
      objectDirs: [join(p.state, 'push.git', 'objects'), '/mirrors/r.git/objects'],
    });
  });
});
