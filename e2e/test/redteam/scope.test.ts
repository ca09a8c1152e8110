// I2, the write scope, on each built-in forge kind: a hostile agent in a real bottle
// calls its sidecar with every argument it likes. It reads anywhere; it writes to its own
// issue alone. A write outside (another issue, another repository, a smuggled owner or
// repo, a number in disguise) is refused before any forge request, and logged; the
// forge's world shows no trace of it.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok).each(['gitea', 'github'] as const)(
  'red team: writes stay in the issue (%s)',
  (kind) => {
    const rt = new RedTeam(kind);
    let other = 0;
    let elsewhere = 0;
    beforeAll(async () => {
      await rt.start();
      other = rt.gitea.createIssue('alice', 'acme/widgets', { title: 'Not yours' });
      elsewhere = rt.gitea.createIssue('alice', 'acme/other', { title: 'Not even this repo' });
    });
    afterAll(() => rt.stop());

    it('reads another issue, and every write outside its own is refused and logged', async () => {
      const run = await rt.launch([
        [
          { do: 'call', method: 'read_issue', params: { number: other } },
          { do: 'call', method: 'post_comment', params: { number: rt.issue, body: 'mine' } },
          {
            do: 'call',
            method: 'post_comment',
            params: { number: other, body: 'hijacked' },
            mayFail: true,
          },
          {
            do: 'call',
            method: 'update_description',
            params: { number: other, body: 'rewritten' },
            mayFail: true,
          },
          {
            do: 'call',
            method: 'post_comment',
            params: { number: elsewhere, owner: 'acme', repo: 'other', body: 'smuggled' },
            mayFail: true,
          },
          {
            do: 'call',
            method: 'post_comment',
            params: { number: `${other}`, body: 'a number in disguise' },
            mayFail: true,
          },
          {
            do: 'call',
            method: 'post_comment',
            params: { number: other + 0.5, body: 'half an issue' },
            mayFail: true,
          },
        ],
      ]);
      const [read, mine, ...refused] = run.steps;
      expect(read?.['ok']).toBe(true);
      expect(mine?.['ok']).toBe(true);
      expect(refused.map((s) => [s['ok'], s['code']])).toEqual([
        [false, 'SCOPE_DENIED'],
        [false, 'SCOPE_DENIED'],
        [false, 'INVALID_INPUT'],
        [false, 'INVALID_INPUT'],
        [false, 'INVALID_INPUT'],
      ]);

      // Nothing reached the forge outside the issue.
      const bodies = (repo: string, n: number) =>
        rt.gitea.issue(repo, n).comments.map((c) => c.body);
      expect(bodies('acme/widgets', other)).toEqual([]);
      expect(rt.gitea.issue('acme/widgets', other).body).not.toBe('rewritten');
      expect(bodies('acme/other', elsewhere)).toEqual([]);
      expect(bodies('acme/widgets', rt.issue)).toEqual(['mine']);

      // Each refusal is in the op log, as what was asked; only the allowed write started.
      const ops = readFileSync(join(run.dir, 'state', 'ops.jsonl'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(
        ops.filter((o) => o['outcome'] === 'rejected').map((o) => `${o['method']} ${o['target']}`),
      ).toEqual([
        `post_comment #${other}`,
        `update_description #${other}`,
        `post_comment #${rt.issue}`,
        'post_comment (string)',
        'post_comment (number)',
      ]);
      expect(ops.filter((o) => o['outcome'] === 'started').map((o) => o['target'])).toEqual([
        `#${rt.issue}`,
      ]);
    });
  },
);
