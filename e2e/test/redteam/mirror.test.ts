// I3 and I4, the repository's mirror: every bottle of a repository checks out from
// the host's mirror of it and borrows its objects, read-only. A hostile agent can
// neither change what other bottles read from there, nor make the gate push what it
// borrows as if it were its own work, nor make the host read objects it points at.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

/** A digest of every file under the mirror's objects: what other bottles would read. */
function digest(dir: string): string {
  const h = createHash('sha256');
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true }).sort((a, b) =>
      a.name.localeCompare(b.name),
    )) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else h.update(p).update(readFileSync(p));
    }
  };
  walk(dir);
  return h.digest('hex');
}

describe.skipIf(!docker.ok)('red team: the repository mirror', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start({ 'README.md': '# widgets\n', 'a.txt': 'a\n' }));
  afterAll(() => rt.stop());

  it('an agent cannot write, replace or remove anything of the mirror it borrows from', async () => {
    const first = await rt.launch([
      [
        {
          do: 'sh',
          cmd: [
            'cat .git/objects/info/alternates',
            'find /var/bb/mirror -type f | head -3',
            'touch /var/bb/mirror/planted',
            'for f in $(find /var/bb/mirror -type f); do echo x > "$f"; rm -f "$f"; done',
            'chmod -R 777 /var/bb/mirror',
            'mount -o remount,rw /var/bb/mirror',
          ].join('; '),
          mayFail: true,
        },
      ],
    ]);
    const mirror = rt.meta(first).mirror!;
    expect(mirror).toBeDefined();
    const out = String(first.steps[0]?.['stdout'] ?? '');
    // It does see the mirror where its checkout says its history is.
    expect(out).toContain('/var/bb/mirror');
    expect(out).toMatch(/\/var\/bb\/mirror\/[0-9a-f]{2}\/[0-9a-f]{38}/);
    const before = digest(join(mirror, 'objects'));
    expect(readdirSync(join(mirror, 'objects'))).not.toContain('planted');
    // The next bottle of the repository checks out whole from the same mirror.
    const second = await rt.launch([[{ do: 'sh', cmd: 'cat a.txt' }]]);
    expect(rt.meta(second).mirror).toBe(mirror);
    expect(second.steps[0]?.['stdout']).toBe('a\n');
    expect(digest(join(mirror, 'objects'))).toBe(before);
  });

  it("an agent's own alternates are never read: it can push only what its own store holds", async () => {
    const run = await rt.launch([
      [
        { do: 'write', path: 'fix.txt', content: 'fixed\n' },
        { do: 'commit', message: 'Fix' },
        // Its new objects moved to a directory of the workspace its alternates name:
        // complete for its own git, which follows them.
        {
          do: 'sh',
          cmd: [
            'mkdir -p .stash',
            'mv .git/objects/?? .stash/',
            "printf '/var/bb/mirror\\n/workspace/.stash\\n' > .git/objects/info/alternates",
            'git log -1 --format=%s',
          ].join(' && '),
        },
        { do: 'call', method: 'open_pr', params: { title: 'Fix' }, mayFail: true },
      ],
    ]);
    expect(run.steps[2]?.['stdout']).toBe('Fix\n');
    // The gate reads the checkout's own store as data and never its alternates: the
    // commit is incomplete there, and nothing is pushed.
    const open = run.steps.find((s) => s['method'] === 'open_pr');
    expect(open?.['ok'], JSON.stringify(open)).toBe(false);
    expect(JSON.stringify(open)).toMatch(/incomplete/);
    expect(await rt.refs('acme/widgets')).not.toContain(`refs/heads/${rt.meta(run).branch}`);
  });
});
