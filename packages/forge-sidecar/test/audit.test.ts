import { mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GENESIS, OpLog, verifyOpLog } from '../src/op-log';
import { type QueueEvent, QueueReader, QueueWriter } from '../src/queue';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'bb-audit-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function logOf(n: number): string {
  const log = new OpLog(join(dir, 'ops.jsonl'));
  for (let i = 1; i <= n; i++)
    log.append({
      method: 'read_issue',
      target: `#${i}`,
      outcome: 'ok',
      summary: `read issue #${i}`,
    });
  return readFileSync(join(dir, 'ops.jsonl'), 'utf8');
}

describe('op log hash chain', () => {
  it('verifies an untouched log and continues the chain across restarts', () => {
    logOf(3);
    const again = new OpLog(join(dir, 'ops.jsonl'));
    again.append({ method: 'push', target: 'branch b', outcome: 'ok', summary: 'pushed' });
    const v = verifyOpLog(readFileSync(join(dir, 'ops.jsonl'), 'utf8'));
    expect(v).toMatchObject({ ok: true, problems: [] });
    expect(v.entries.map((e) => e.seq)).toEqual([1, 2, 3, 4]);
    expect(v.entries[0]!.prev).toBe(GENESIS);
  });

  it('detects an edited line, naming the line after it', () => {
    const lines = logOf(4).split('\n');
    lines[1] = lines[1]!.replace('read issue #2', 'read issue #9');
    const v = verifyOpLog(lines.join('\n'));
    expect(v.ok).toBe(false);
    expect(v.problems).toEqual([{ line: 3, problem: expect.stringMatching(/hash chain broken/) }]);
  });

  it('detects a removed line, a reordered pair and a truncated tail', () => {
    const lines = logOf(4).split('\n');
    const removed = [lines[0], lines[2], lines[3], ''].join('\n');
    expect(verifyOpLog(removed).problems.map((p) => p.line)).toContain(2);
    const swapped = [lines[0], lines[2], lines[1], lines[3], ''].join('\n');
    expect(verifyOpLog(swapped).ok).toBe(false);
    const truncated = lines.slice(0, 2).join('\n');
    expect(verifyOpLog(truncated).problems.map((p) => p.problem)).toContainEqual(
      expect.stringMatching(/not terminated/),
    );
  });

  it('without an anchor the last line is unprotected; with the head, any single changed byte is detected', () => {
    const text = logOf(3);
    const head = new OpLog(join(dir, 'ops.jsonl')).head;
    const lastLineEdit = text.replace('read issue #3"', 'read issue #4"');
    expect(verifyOpLog(lastLineEdit).ok).toBe(true);
    expect(verifyOpLog(lastLineEdit, head).problems).toEqual([
      { line: 3, problem: expect.stringMatching(/recorded head hash/) },
    ]);
    expect(verifyOpLog(text, head).ok).toBe(true);
    const lines = text.split('\n');
    expect(verifyOpLog([lines[0], lines[1], ''].join('\n'), head).problems[0]!.problem).toMatch(
      /lines were removed/,
    );
    for (let at = 0; at < text.length - 1; at += 7) {
      if (text[at] === '\n') continue;
      const changed = text.slice(0, at) + (text[at] === 'a' ? 'b' : 'a') + text.slice(at + 1);
      if (changed === text) continue;
      expect(verifyOpLog(changed, head).ok, `byte ${at}`).toBe(false);
    }
  });
});

describe('queue directory relay', () => {
  it('delivers in write order, at least once, and once per reader by id', async () => {
    const w = new QueueWriter(join(dir, 'q'), 'slug-1');
    const written = [
      w.write('checkin', { n: 1 }),
      w.write('op', { n: 2 }),
      w.write('done', { status: 'success', summary: 's' }),
    ];
    const reader = new QueueReader(join(dir, 'q'));
    const seen: QueueEvent[] = [];
    let fail = true;
    // The handler fails on the second event: it and everything after stay queued.
    await expect(
      reader.drain((e) => {
        if (e.data['n'] === 2 && fail) throw new Error('orchestrator busy');
        seen.push(e);
      }),
    ).rejects.toThrow('orchestrator busy');
    expect(readdirSync(join(dir, 'q')).filter((f) => f.endsWith('.json'))).toHaveLength(2);
    fail = false;
    await reader.drain((e) => {
      seen.push(e);
    });
    expect(seen.map((e) => e.id)).toEqual(written.map((e) => e.id));
    // A duplicated file (e.g. restored from a backup) reaches this reader's handler once.
    const w2 = new QueueWriter(join(dir, 'q2'));
    const ev = w2.write('done', { status: 'success', summary: 's' });
    const file = readdirSync(join(dir, 'q2')).find((f) => f.endsWith('.json'))!;
    writeFileSync(join(dir, 'q2', `9${file}`), readFileSync(join(dir, 'q2', file)));
    const r2 = new QueueReader(join(dir, 'q2'));
    const got: string[] = [];
    await r2.drain((e) => {
      got.push(e.id);
    });
    expect(got).toEqual([ev.id]);
  });

  it('ignores torn temporary files, sweeps stale ones, and quarantines unreadable events', async () => {
    const q = join(dir, 'q');
    const w = new QueueWriter(q);
    w.write('checkin', {});
    writeFileSync(join(q, '.000000000000001-torn.tmp'), '{"id": "half');
    writeFileSync(join(q, '000000000000002-000000001-bad.json'), 'garbage');
    const bad: string[] = [];
    const r = new QueueReader(q, { staleTmpMs: 60_000, onBadFile: (f) => bad.push(f) });
    const got: QueueEvent[] = [];
    await r.drain((e) => {
      got.push(e);
    });
    expect(got).toHaveLength(1);
    expect(bad).toEqual(['000000000000002-000000001-bad.json']);
    expect(readdirSync(join(q, 'bad'))).toEqual(['000000000000002-000000001-bad.json']);
    expect(readdirSync(q)).toContain('.000000000000001-torn.tmp');
    const old = (Date.now() - 120_000) / 1000;
    utimesSync(join(q, '.000000000000001-torn.tmp'), old, old);
    await r.drain(() => {});
    expect(readdirSync(q)).not.toContain('.000000000000001-torn.tmp');
  });
});
