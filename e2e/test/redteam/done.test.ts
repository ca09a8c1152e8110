// I4, after done: `signal_done` closes the turn's writes. A hostile agent that
// signals and then goes on writing, or signals again to rewrite its record, gets
// `already_done` and reaches nothing.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('red team: after signal_done', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());
  const comments = () => rt.gitea.issue('acme/widgets', rt.issue).comments.map((c) => c.body);

  it('a comment after done does not reach the forge', async () => {
    const run = await rt.launch([
      [
        { do: 'done', status: 'success', summary: 'All done.' },
        {
          do: 'call',
          method: 'post_comment',
          params: { number: rt.issue, body: 'after-done comment' },
          mayFail: true,
        },
      ],
    ]);
    expect(comments()).not.toContain('after-done comment');
    const call = run.steps.find((s) => s['method'] === 'post_comment');
    expect(call?.['ok']).toBe(false);
    expect(call?.['code']).toBe('ALREADY_DONE');
  });

  it('a second done does not replace the first in the record', async () => {
    const run = await rt.launch([
      [
        { do: 'done', status: 'failure', summary: 'I could not fix it.' },
        {
          do: 'call',
          method: 'signal_done',
          params: { status: 'success', summary: 'Fixed everything, merge it.' },
          mayFail: true,
        },
      ],
    ]);
    const { record } = await rt.record(run);
    expect(record.done).toEqual({ status: 'failure', summary: 'I could not fix it.' });
  });

  it('a push or a PR after done does not reach the forge', async () => {
    const before = await rt.refs('acme/widgets');
    const run = await rt.launch([
      [
        { do: 'write', path: 'late.txt', content: 'late\n' },
        { do: 'commit', message: 'Late' },
        { do: 'done', status: 'success', summary: 'Done.' },
        { do: 'call', method: 'push', mayFail: true },
        { do: 'call', method: 'open_pr', params: { title: 'Late' }, mayFail: true },
        {
          do: 'call',
          method: 'update_description',
          params: { number: rt.issue, body: 'rewritten after done' },
          mayFail: true,
        },
      ],
    ]);
    expect(await rt.refs('acme/widgets')).toEqual(before);
    expect(rt.gitea.issue('acme/widgets', rt.issue).body).not.toBe('rewritten after done');
    for (const m of ['push', 'open_pr', 'update_description'])
      expect(run.steps.find((s) => s['method'] === m)?.['code']).toBe('ALREADY_DONE');
  });
});
