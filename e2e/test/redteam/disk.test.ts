// I6: a bottle cannot take the host or its neighbours down. An agent that fills
// its disk hits its own quota: its writes fail, its turn is recorded, its audit
// goes on, and the next bottle works as before.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();
const QUOTA = 48 * 1024 * 1024;

describe.skipIf(!docker.ok)('red team: a bottle that fills its disk', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());
  const env = { BB_BOTTLE_DISK: '48m' };

  it('writes stop at the quota, the audit goes on, and the record is kept', async () => {
    const run = await rt.launch(
      [
        [
          // Three times the quota; the agent's writes must stop long before.
          { do: 'sh', cmd: 'dd if=/dev/zero of=/workspace/fill bs=1M count=144', mayFail: true },
          { do: 'sh', cmd: 'dd if=/dev/zero of="$HOME/fill" bs=1M count=144', mayFail: true },
          { do: 'sh', cmd: 'stat -c %s /workspace/fill "$HOME/fill"' },
          { do: 'comment', body: 'disk is full, still audited' },
          { do: 'done', status: 'failure', summary: 'Filled the disk.' },
        ],
      ],
      { env },
    );
    // What the agent managed to write, as it sees it.
    const written = String(run.steps[2]!['stdout'])
      .trim()
      .split('\n')
      .map(Number)
      .reduce((x, y) => x + y, 0);
    expect(written).toBeLessThanOrEqual(QUOTA);
    expect(rt.gitea.issue('acme/widgets', rt.issue).comments.map((c) => c.body)).toContain(
      'disk is full, still audited',
    );
    const { record } = await rt.record(run);
    expect(record.done?.status).toBe('failure');
    expect(record.opLog.verified).toBe(true);
    expect(
      record.opLog.entries.some((e) => String(e['summary']).startsWith('posted comment')),
    ).toBe(true);
  });

  it('a neighbour launched after it works as before', async () => {
    const run = await rt.launch([[{ do: 'comment', body: 'neighbour fine' }]], { env });
    expect(run.outcome.ok).toBe(true);
  });
});
