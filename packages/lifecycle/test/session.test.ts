// A bottle's session is the one writer of its row: what it holds and what the row
// says do not part, even when a write fails; turn-log changes never interleave.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hostBottleStorage } from '@bb/headless';
import { describe, expect, it } from 'vitest';
import { INITIAL } from '../src/machine';
import { BottleSession } from '../src/session';
import { readTurnLog, updateTurnLog, withTurnLog } from '../src/turn-log';

describe('BottleSession', () => {
  it('puts its state back when the row could not be written', async () => {
    let fail = false;
    const written: string[] = [];
    const s = new BottleSession('acme/app#7', {
      write: async (_s, status) => {
        if (fail) throw new Error('database is locked');
        written.push(status);
      },
    });
    s.slug = 'impl-abc12';
    await s.commit({ ...INITIAL, status: 'running' });
    fail = true;
    await expect(s.commit({ ...s.state, status: 'frozen' })).rejects.toThrow(/locked/);
    expect(s.state.status).toBe('running');
    fail = false;
    await s.commit({ ...s.state, status: 'frozen' });
    expect(written).toEqual(['running', 'frozen']);
    expect(s.state.status).toBe('frozen');
  });
});

describe('the turn log', () => {
  it('changes one at a time: a change made while another reads and writes is not lost', async () => {
    const home = mkdtempSync(join(tmpdir(), 'bb-turnlog-'));
    try {
      const storage = hostBottleStorage({ BB_HOME: home });
      const slug = 'impl-abc12';
      const { mkdirSync } = await import('node:fs');
      mkdirSync(join(home, 'bottles', slug), { recursive: true });
      // A slow change (as a drain is) and a quick one started while it runs.
      const slow = withTurnLog(storage, slug, async () => {
        const log = await readTurnLog(storage, slug);
        await new Promise((r) => setTimeout(r, 30));
        await storage.writeNote(slug, 'turn', JSON.stringify({ ...log, prs: [4] }));
      });
      const quick = updateTurnLog(storage, slug, (log) => ({
        ...log,
        fired: { reason: 'silence', detail: 'no check-in' },
      }));
      await Promise.all([slow, quick]);
      const log = await readTurnLog(storage, slug);
      expect(log.prs).toEqual([4]);
      expect(log.fired?.reason).toBe('silence');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
