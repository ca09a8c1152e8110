// The sidecar's side of the wall: after done nothing writes, a write that cannot
// be logged is not made, an unanswered write is recorded as unknown, the token
// comes from a file, and pushes never run git in the agent's repository.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GiteaForge } from '@bb/forge';
import { afterEach, describe, expect, it } from 'vitest';
import { verifyOpLogFile } from '../src/op-log';
import { type Harness, rawPost, TOKEN, useHarness } from './harness';

const harness = useHarness();
let h: Harness;
const comments = () => h.server.issue('acme/widgets', 1).comments.map((c) => c.body);
const posts = () => h.exchanges.filter((x) => x.method !== 'GET').length;

describe('after signal_done', () => {
  it('every write answers ALREADY_DONE and makes no request; reads still work; the first done stands', async () => {
    h = await harness();
    await h.client.signalDone('failure', 'I could not.');
    const before = posts();
    for (const call of [
      () => h.client.postComment(1, 'late'),
      () => h.client.updateDescription(1, 'late'),
      () => h.client.push(),
      () => h.client.openPr({ title: 'late' }),
      () => h.client.signalDone('success', 'Actually fine.'),
    ])
      expect((await call().catch((e) => e)).code).toBe('ALREADY_DONE');
    expect(posts()).toBe(before);
    expect((await h.client.readIssue(1)).number).toBe(1);
    const log = verifyOpLogFile(h.env['BB_OPS_LOG']!);
    expect(log.ok).toBe(true);
    expect(log.entries.filter((e) => e.outcome === 'rejected')).toHaveLength(5);
  });
});

describe('a gate serving several turns (a warm bottle)', () => {
  it('a done closes writes for its turn only: they open again when the host says a later turn, never before', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-turn-'));
    const turnFile = join(dir, 'turn');
    writeFileSync(turnFile, '1\n');
    h = await harness({ env: { BB_TURN_FILE: turnFile } });
    expect((await h.client.health()).turn).toBe(1);
    await h.client.signalDone('success', 'Turn one done.');
    expect((await h.client.postComment(1, 'still turn one').catch((e) => e)).code).toBe(
      'ALREADY_DONE',
    );
    // Nothing the agent can send opens them: only the host's word of a new turn.
    writeFileSync(turnFile, '2\n');
    expect((await h.client.health()).turn).toBe(2);
    await h.client.postComment(1, 'turn two');
    expect(comments()).toContain('turn two');
    expect(comments()).not.toContain('still turn one');
    await h.client.signalDone('success', 'Turn two done.');
    expect((await h.client.postComment(1, 'after two').catch((e) => e)).code).toBe('ALREADY_DONE');
    // A word that cannot be read, or says an earlier turn, opens nothing.
    rmSync(turnFile);
    expect((await h.client.postComment(1, 'file gone').catch((e) => e)).code).toBe('ALREADY_DONE');
    writeFileSync(turnFile, '1\n');
    expect((await h.client.postComment(1, 'turn one again').catch((e) => e)).code).toBe(
      'ALREADY_DONE',
    );
    expect((await h.client.health()).turn).toBe(2);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('the audit fails closed', () => {
  it('with the op log unwritable, a write is refused before any request', async () => {
    h = await harness();
    // The log opens on the first call: make its path unwritable before that.
    mkdirSync(h.env['BB_OPS_LOG']!);
    const before = posts();
    const err = await h.client.postComment(1, 'unlogged').catch((e) => e);
    expect(err.code).toBe('AUDIT_UNAVAILABLE');
    expect(posts()).toBe(before);
    expect(comments()).not.toContain('unlogged');
  });

  it('with the queue unwritable, a write is refused before any request', async () => {
    h = await harness();
    const q = h.env['BB_QUEUE_DIR']!;
    rmSync(q, { recursive: true, force: true });
    writeFileSync(q, 'not a directory');
    const before = posts();
    const err = await h.client.postComment(1, 'unrelayed').catch((e) => e);
    expect(err.code).toBe('AUDIT_UNAVAILABLE');
    expect(posts()).toBe(before);
    // Its started line is there; no outcome claims it happened.
    const entries = verifyOpLogFile(h.env['BB_OPS_LOG']!).entries;
    expect(entries.some((e) => e.outcome === 'ok' && e.method === 'post_comment')).toBe(false);
  });

  it('an op log at its size limit refuses further calls', async () => {
    h = await harness({ env: { BB_OPS_LOG_MAX: '1000' } });
    let refused: { code?: string } | undefined;
    for (let i = 0; i < 20 && !refused; i++)
      await h.client.readIssue(1).catch((e) => (refused = e));
    expect(refused?.code).toBe('AUDIT_UNAVAILABLE');
    expect(readFileSync(h.env['BB_OPS_LOG']!).length).toBeLessThanOrEqual(1000);
    expect(verifyOpLogFile(h.env['BB_OPS_LOG']!).ok).toBe(true);
  });
});

describe('a write the forge never answers', () => {
  let silent: Server;
  afterEach(() => silent?.close());

  it('is recorded as unknown and reported as OUTCOME_UNKNOWN, so the agent reads first', async () => {
    // A "forge" that accepts connections and never answers.
    silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const port = (silent.address() as { port: number }).port;
    h = await harness({
      makeForge: (env) =>
        new GiteaForge({
          baseUrl: `http://127.0.0.1:${port}/api/v1`,
          token: env.FORGE_TOKEN,
          owner: 'acme',
          repo: 'widgets',
          clientOptions: { headersTimeoutMs: 300, bodyTimeoutMs: 300, retries: 0 },
        }),
    });
    const err = await h.client.postComment(1, 'maybe').catch((e) => e);
    expect(err.code).toBe('OUTCOME_UNKNOWN');
    expect(err.message).toMatch(/read #1 before you try again/);
    const entries = verifyOpLogFile(h.env['BB_OPS_LOG']!).entries;
    expect(entries.map((e) => e.outcome)).toEqual(['started', 'unknown']);
    expect(entries[1]!.attempt).toBe(entries[0]!.seq);
  });
});

describe('the token', () => {
  it('is read from FORGE_TOKEN_FILE and never needs to be in the environment', async () => {
    const { mkdtempSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'bb-tokfile-'));
    writeFileSync(join(dir, 'token'), `${TOKEN}\n`, { mode: 0o400 });
    h = await harness({ env: { FORGE_TOKEN: '', FORGE_TOKEN_FILE: join(dir, 'token') } });
    expect((await h.client.postComment(1, 'from a file')).author.login).toBe('bb-claude');
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('races and limits a hostile agent plays', () => {
  const branchSha = () =>
    h.server.git
      .git(h.server.git.dirOf('acme', 'widgets'), [
        'rev-parse',
        '--verify',
        '-q',
        'refs/heads/bb/implementer-1',
      ])
      .then((s) => s.trim())
      .catch(() => '');

  it('a push batched with signal_done does not reach the forge after done', async () => {
    h = await harness();
    writeFileSync(join(h.workspace, 'a.txt'), 'a\n');
    await h.git('add', 'a.txt');
    await h.git('commit', '-q', '-m', 'a');
    const r = await rawPost(
      h.env['BB_SIDECAR_SOCKET']!,
      JSON.stringify([
        { jsonrpc: '2.0', id: 1, method: 'push', params: {} },
        {
          jsonrpc: '2.0',
          id: 2,
          method: 'signal_done',
          params: { status: 'success', summary: 'd' },
        },
      ]),
    );
    const answers = JSON.parse(r.text) as Array<{
      id: number;
      error?: { data?: { code?: string } };
    }>;
    expect(answers.find((a) => a.id === 1)?.error?.data?.code).toBe('ALREADY_DONE');
    expect(await branchSha()).toBe('');
  });

  it('a write is not started unless its outcome line will fit in the op log', async () => {
    const MAX = 12_000;
    h = await harness({ env: { BB_OPS_LOG_MAX: String(MAX) } });
    writeFileSync(join(h.workspace, 'b.txt'), 'b\n');
    await h.git('add', 'b.txt');
    await h.git('commit', '-q', '-m', 'b');
    // Refused calls with long, agent-chosen params fill the log close to its limit.
    const size = () => (existsSync(h.env['BB_OPS_LOG']!) ? statSync(h.env['BB_OPS_LOG']!).size : 0);
    while (MAX - size() > 5000)
      await h.client
        .call('read_issue', { number: 1, ['k'.repeat(3000)]: 1 })
        .catch(() => undefined);
    const err = await h.client.push().catch((e) => e);
    const pushed = await branchSha();
    if (pushed) {
      // Pushed: then its outcome was logged and its commit relayed.
      const log = verifyOpLogFile(h.env['BB_OPS_LOG']!);
      expect(log.entries.at(-1)).toMatchObject({ method: 'push', outcome: 'ok' });
    } else expect(err.code).toBe('AUDIT_UNAVAILABLE');
    expect(size()).toBeLessThanOrEqual(MAX);
  });
});

describe('the relayed head', () => {
  it('covers every line, write outcomes included, once the sidecar stops', async () => {
    h = await harness();
    await h.client.postComment(1, 'one');
    await h.client.postComment(1, 'two');
    await h.sidecar.close();
    const q = h.env['BB_QUEUE_DIR']!;
    const heads = readdirSync(q)
      .filter((f) => f.endsWith('.json'))
      .sort()
      .map(
        (f) =>
          JSON.parse(readFileSync(join(q, f), 'utf8')) as {
            type: string;
            data: Record<string, unknown>;
          },
      )
      .filter((e) => e.type === 'checkin' && typeof e.data['opLogSeq'] === 'number');
    const log = verifyOpLogFile(h.env['BB_OPS_LOG']!);
    expect(heads.at(-1)!.data['opLogSeq']).toBe(log.entries.length);
    const last = readFileSync(h.env['BB_OPS_LOG']!, 'utf8').trimEnd().split('\n').at(-1)!;
    const { createHash } = await import('node:crypto');
    expect(heads.at(-1)!.data['opLogHead']).toBe(createHash('sha256').update(last).digest('hex'));
  });
});
