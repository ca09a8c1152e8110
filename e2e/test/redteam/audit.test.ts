// I5: the audit fails closed. A forge write is logged before it is attempted, and
// not attempted when it cannot be logged; tampering with any line of the op log,
// of this turn or an earlier one, is caught at record time and by
// `bb provenance verify`, which then exits non-zero.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCli } from '@bb/cli';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HostileRun, RedTeam } from './harness';

const docker = await probeDocker();
const root = process.getuid?.() === 0;

describe.skipIf(!docker.ok)('red team: the audit fails closed', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());
  const comments = () => rt.gitea.issue('acme/widgets', rt.issue).comments.map((c) => c.body);
  const verify = async (slug: string) => {
    let out = '';
    const code = await runCli(['provenance', 'verify', slug], {
      env: rt.env,
      cwd: rt.home,
      stdout: (t) => (out += t),
      stderr: (t) => (out += t),
    });
    return { code, out };
  };

  /** A first turn that only reads, so the bottle has an op log and a session. */
  const quietBottle = (second: Array<Record<string, unknown>>) =>
    rt.launch([[{ do: 'read_issue' }], second as never]);
  /** A raw post_comment call that may be refused. */
  const tryComment = (body: string) => ({
    do: 'call',
    method: 'post_comment',
    params: { number: rt.issue, body },
    mayFail: true,
  });

  it('with the op log on a full filesystem, a comment is not posted', async () => {
    const run = await quietBottle([tryComment('unlogged-1')]);
    const state = join(run.dir, 'state');
    let mounted = false;
    if (root) {
      // A full disk under the op log (what an agent filling a shared disk would
      // cause): the log has to start a new block, and there is none.
      renameSync(state, `${state}.kept`);
      mkdirSync(state);
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', state]);
      mounted = true;
      execFileSync('sh', [
        '-c',
        `chown 1001:1001 ${state} 2>/dev/null; chown 1000:1000 ${state} 2>/dev/null; chmod 777 ${state}; dd if=/dev/zero of=${state}/fill bs=4k 2>/dev/null || true`,
      ]);
    } else {
      rmSync(join(state, 'ops.jsonl'));
      mkdirSync(join(state, 'ops.jsonl'));
    }
    try {
      await rt.resume(run, 'Go on.', { steps: 1 }).catch(() => undefined);
    } finally {
      if (mounted) execFileSync('umount', [state]);
    }
    expect(comments()).not.toContain('unlogged-1');
  });

  it('with the op log unwritable, no write of any kind is attempted', async () => {
    const before = await rt.refs('acme/widgets');
    const run = await quietBottle([
      { do: 'write', path: 'x.txt', content: 'x\n' },
      { do: 'commit', message: 'X' },
      tryComment('unlogged-2'),
      { do: 'call', method: 'open_pr', params: { title: 'Unlogged' }, mayFail: true },
      {
        do: 'call',
        method: 'update_description',
        params: { number: rt.issue, body: 'unlogged-3' },
        mayFail: true,
      },
    ]);
    const log = join(run.dir, 'state', 'ops.jsonl');
    copyFileSync(log, `${log}.kept`);
    rmSync(log);
    mkdirSync(log);
    await rt.resume(run, 'Go on.', { steps: 5 }).catch(() => undefined);
    expect(comments()).not.toContain('unlogged-2');
    expect(rt.gitea.issue('acme/widgets', rt.issue).body).not.toBe('unlogged-3');
    expect(await rt.refs('acme/widgets')).toEqual(before);
  });

  it('with the queue on a full filesystem, a comment is not posted', async () => {
    const run = await quietBottle([tryComment('unrelayed-1')]);
    const queue = join(run.dir, 'queue');
    let mounted = false;
    if (root) {
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16k', 'tmpfs', queue]);
      mounted = true;
      execFileSync('sh', [
        '-c',
        `chown 1001:1001 ${queue}; dd if=/dev/zero of=${queue}/fill bs=4k 2>/dev/null || true`,
      ]);
    } else {
      rmSync(queue, { recursive: true });
      writeFileSync(queue, 'not a directory');
    }
    try {
      await rt.resume(run, 'Go on.', { steps: 1 }).catch(() => undefined);
    } finally {
      if (mounted) execFileSync('umount', [queue]);
    }
    expect(comments()).not.toContain('unrelayed-1');
  });

  const twoTurns = async (): Promise<{ first: HostileRun; log: string }> => {
    const first = await rt.launch([
      [{ do: 'comment', body: 'turn one' }],
      [{ do: 'comment', body: 'turn two' }],
    ]);
    // An untouched turn verifies: no false alarm before the attack.
    expect((await rt.record(first)).record.opLog.verified).toBe(true);
    return { first, log: join(first.dir, 'state', 'ops.jsonl') };
  };

  it('an edited last line of an earlier turn is caught, and verify exits non-zero', async () => {
    const { first, log } = await twoTurns();
    // The last line of turn one, rewritten to hide the comment; JSON still valid.
    const lines = readFileSync(log, 'utf8').trimEnd().split('\n');
    lines[lines.length - 1] = lines.at(-1)!.replace(/"summary":"[^"]*"/, '"summary":"read issue"');
    writeFileSync(log, `${lines.join('\n')}\n`);
    const second = await rt.resume(first);
    const { record } = await rt.record(second);
    expect(record.opLog.verified).toBe(false);
    const v = await verify(first.slug);
    expect(v.code, v.out).not.toBe(0);
  });

  it('a record whose op log was found tampered never verifies OK', async () => {
    const run = await rt.launch([[{ do: 'read_issue' }, { do: 'comment', body: 'kept' }]]);
    const log = join(run.dir, 'state', 'ops.jsonl');
    const lines = readFileSync(log, 'utf8').trimEnd().split('\n');
    lines[0] = lines[0]!.replace('"read issue', '"read nothing');
    writeFileSync(log, `${lines.join('\n')}\n`);
    const { record } = await rt.record(run);
    expect(record.opLog.verified).toBe(false);
    const v = await verify(record.id);
    expect(v.code, v.out).not.toBe(0);
  });
});
