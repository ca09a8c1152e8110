// I1/I8, the warm pool: a pooled bottle is made before anyone knows its issue and
// bound to one later. A hostile agent in one pooled bottle can leave nothing for the
// next issue's (its home, its workspace, its scratch space, the shared mirror, a
// process, the turns' commands), and a pooled bottle is used once.
import { canPool } from '@bb/headless';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileIssue } from '../support';
import { RedTeam } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok || !canPool(new RedTeam().backend))('red team: the warm pool', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start({ 'README.md': '# widgets\n' }));
  afterAll(() => rt.stop());

  /** What a turn finds of anyone before it, on one line. */
  const LOOK = {
    do: 'sh',
    cmd: [
      'printf "SEEN[%s]" "$(cat ~/bb-mark /tmp/bb-mark /workspace/bb-mark /var/bb/mirror/bb-mark 2>/dev/null | tr "\\n" " ")"',
      'printf " PROCS[%s]\\n" "$(ps -eo args | grep -c "^sleep 40[12]")"',
    ].join('\n'),
    mayFail: true,
  };

  it('a pooled bottle carries nothing from one issue to the next', async () => {
    const first = await rt.launch(
      [
        [
          LOOK,
          {
            do: 'sh',
            cmd: [
              // Marks everywhere it can write, and where it should not be able to.
              'for f in ~/bb-mark /tmp/bb-mark /workspace/bb-mark; do echo planted-by-issue-one > "$f"; done',
              'echo planted-by-issue-one > /var/bb/mirror/bb-mark && echo WROTE-MIRROR',
              'mkdir -p /var/bb/mirror/pack && echo x > /var/bb/mirror/pack/poison.pack && echo WROTE-PACK',
              // The next turns' commands, planted for whoever comes next.
              'echo \'{"argv":["sh","-c","echo planted"],"env":{},"nonce":"00000000"}\' > /var/bb/turns/1.json && echo WROTE-TURNS',
              // Processes meant to outlive the turn.
              '(sleep 401 > /dev/null 2>&1 &)',
              'setsid sleep 402 > /dev/null 2>&1 < /dev/null &',
              'true',
            ].join('\n'),
            mayFail: true,
          },
        ],
      ],
      { pooled: true, name: 'pool-one' },
    );
    const out1 = first.steps.map((s) => String(s['stdout'] ?? '')).join('\n');
    expect(out1).toContain('SEEN[] PROCS[0]');
    expect(out1).not.toContain('WROTE-MIRROR');
    expect(out1).not.toContain('WROTE-PACK');
    expect(out1).not.toContain('WROTE-TURNS');
    // Bound, it is the issue's bottle and nobody else's: never pooled again.
    expect(rt.meta(first).pooled).toBeUndefined();
    expect(rt.meta(first).forge?.issue).toBe(rt.issue);

    // Another issue, another pooled bottle (made now, after the first ran).
    const next = fileIssue(rt.gitea, 'implementer', 'Another thing', 'Also broken.');
    const second = await rt.launch([[LOOK]], { pooled: true, name: 'pool-two', issue: next });
    expect(second.slug).not.toBe(first.slug);
    const out2 = second.steps.map((s) => String(s['stdout'] ?? '')).join('\n');
    expect(out2).toContain('SEEN[] PROCS[0]');
    expect(out2).not.toContain('planted-by-issue-one');
    expect(rt.meta(second).forge?.issue).toBe(next);
  }, 240_000);
});
