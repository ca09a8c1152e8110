// Fencing of the agent's calls: with a hold file, the sidecar serves a call only while the
// file names its gate and a deadline still ahead (the host renews it with its lease). A
// host that stalled stops renewing; a gate another host replaced finds another id. Either
// way the call is refused before any request, and nothing is written where the host that
// holds the issue now reads (the op log, the queue).
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadSidecarEnv } from '../src/config';
import { formatHold, holdReader } from '../src/hold';
import { verifyOpLogFile } from '../src/op-log';
import { useHarness } from './harness';

const harness = useHarness();
const ID = 'gate-4f2a9c1e';

describe('the hold file fences the agent’s writes', () => {
  it('calls are served while the host holds the issue and refused, unlogged, once its hold runs out or names another gate', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-hold-'));
    const file = join(dir, 'hold');
    writeFileSync(file, formatHold(ID, Date.now() + 60_000));
    const h = await harness({ env: { BB_HOLD_FILE: file, BB_HOLD_ID: ID } });
    const writes = () => h.exchanges.filter((e) => e.method !== 'GET').length;
    await h.client.postComment(1, 'Held.');
    expect(writes()).toBe(1);

    // The host stopped renewing: its deadline passed.
    writeFileSync(file, formatHold(ID, Date.now() - 1));
    const lapsed = await h.client.postComment(1, 'Too late.').catch((e) => e);
    expect(lapsed.code).toBe('NOT_HELD');
    expect(lapsed.data.kind).toBe('not_held');
    expect(lapsed.message).toMatch(/hold on this issue ran out at .*Nothing was sent/);
    // A push is a write too.
    await h.git('commit', '-q', '--allow-empty', '-m', 'late');
    expect((await h.client.push().catch((e) => e)).code).toBe('NOT_HELD');

    // Another host's gate runs the bottle now, and renews the file with its own id.
    writeFileSync(file, formatHold('gate-other-host1', Date.now() + 60_000));
    const replaced = await h.client.updateDescription(1, 'mine').catch((e) => e);
    expect(replaced.code).toBe('NOT_HELD');
    expect(replaced.message).toMatch(/another host runs this bottle now/);

    // Nor a read (its op-log line would be written into another host's log), nor the
    // turn's end (its event would reach the queue the new holder reads).
    expect((await h.client.readIssue(1).catch((e) => e)).code).toBe('NOT_HELD');
    expect((await h.client.signalDone('success', 'late').catch((e) => e)).code).toBe('NOT_HELD');
    expect(writes()).toBe(1);
    expect(h.server.issue('acme/widgets', 1).comments.map((c) => c.body)).toEqual(['Held.']);
    // The op log has the held comment only: nothing of what was refused.
    const log = verifyOpLogFile(h.env['BB_OPS_LOG']!);
    expect(log.ok).toBe(true);
    expect(log.entries.map((e) => [e.method, e.outcome])).toEqual([
      ['post_comment', 'started'],
      ['post_comment', 'ok'],
    ]);

    // Renewed for this gate again: it writes.
    writeFileSync(file, formatHold(ID, Date.now() + 60_000));
    await h.client.postComment(1, 'Back.');
    expect(writes()).toBe(2);
  });

  it('a missing or unreadable hold file holds nothing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-hold-'));
    const file = join(dir, 'hold');
    const held = holdReader(file, ID, () => 1000);
    expect(held()).toMatch(/has not said it holds/);
    writeFileSync(file, `${ID} soon\n`);
    expect(held()).toMatch(/ran out/);
    writeFileSync(file, formatHold(ID, 1001));
    expect(held()).toBeUndefined();
    writeFileSync(file, formatHold(ID, 1000));
    expect(held()).toMatch(/ran out at 1970-01-01T00:00:01.000Z/);
  });

  it('a wall clock stepped back does not stretch a hold: its deadline is kept on the monotonic clock too', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-hold-'));
    const file = join(dir, 'hold');
    let wall = 10_000;
    let mono = 500;
    const held = holdReader(
      file,
      ID,
      () => wall,
      () => mono,
    );
    writeFileSync(file, formatHold(ID, 12_000));
    expect(held()).toBeUndefined();
    // 3 s pass, and the wall clock is set back 5 s: by the wall the hold has 4 s left.
    mono += 3000;
    wall += 3000 - 5000;
    expect(held()).toMatch(/ran out/);
    // A renewal is a new deadline.
    writeFileSync(file, formatHold(ID, wall + 1000));
    expect(held()).toBeUndefined();
  });

  it('BB_HOLD_FILE and BB_HOLD_ID are set together or not at all', () => {
    const base = {
      FORGE_GITEA_API: 'http://127.0.0.1:1/api/v1',
      FORGE_OWNER: 'acme',
      FORGE_REPO: 'widgets',
      FORGE_ISSUE_NUMBER: '1',
      FORGE_TOKEN: 'x'.repeat(20),
      BB_SIDECAR_SOCKET: '/tmp/s.sock',
      BB_QUEUE_DIR: '/tmp/q',
      BB_OPS_LOG: '/tmp/ops.jsonl',
      BB_WORKSPACE: '/tmp/w',
      BB_BRANCH: 'bb/x-1',
    };
    expect(() => loadSidecarEnv({ ...base, BB_HOLD_FILE: '/tmp/hold' })).toThrow(/go together/);
    expect(() => loadSidecarEnv({ ...base, BB_HOLD_ID: ID })).toThrow(/go together/);
    expect(() =>
      loadSidecarEnv({ ...base, BB_HOLD_FILE: '/tmp/hold', BB_HOLD_ID: 'short' }),
    ).toThrow(/BB_HOLD_ID must be/);
    expect(loadSidecarEnv({ ...base, BB_HOLD_FILE: '/tmp/hold', BB_HOLD_ID: ID }).BB_HOLD_ID).toBe(
      ID,
    );
  });
});
