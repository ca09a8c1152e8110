// forklift end to end: an upstream and its fork on the Gitea-compatible test server, an
// operator's checkout, real git, and the script agent in a real container (forklift's
// kitchen-sink image, built offline) holding a copy of the repository with no remotes
// and no credentials. The host decides.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ForkWorld, forkWorld, git } from './forklift-world';
import { probeKitchenSink } from './support';

const docker = await probeDocker();
const { ok: hasImage, image: IMAGE } = await probeKitchenSink(docker.ok);
const TOKEN = 'forklift-bot-token-0123456789';

describe.skipIf(!docker.ok || !hasImage)(
  'forklift: a fork kept in sync by an agent with no credential',
  () => {
    let w: ForkWorld;
    let gitea: ForkWorld['gitea'];
    let root: string;
    const commit: ForkWorld['commit'] = (...a) => w.commit(...a);
    const scenario: ForkWorld['scenario'] = (...a) => w.scenario(...a);
    const forklift: ForkWorld['scripted'] = (...a) => w.scripted(...a);
    /** A fork and an upstream that both changed a.txt. */
    const conflicted = async () => {
      const s = await scenario();
      await commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
      await commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
      return s;
    };

    beforeAll(async () => {
      w = await forkWorld({ token: TOKEN, image: IMAGE });
      gitea = w.gitea;
      root = w.root;
    });
    afterAll(async () => {
      await w?.close();
    });

    it('a fast-forward needs no agent: the host opens the PR', async () => {
      const s = await scenario();
      await commit(s.up, { 'b.txt': 'new upstream file\n' }, 'Upstream adds b');
      const { code, result, err } = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
      expect(code, err).toBe(0);
      expect(result).toMatchObject({ outcome: 'synced', agentRan: false });
      const pr = gitea.issue(s.fork, result!.pr!.number);
      expect(pr.pull?.headRef).toBe('forklift/sync');
      expect(pr.body).toContain(String(result!['upstream']));
      // Again: nothing to do once the fork holds it (the PR merged).
      await git(
        root,
        '--git-dir',
        gitea.git.dirOf('bot', s.name),
        'update-ref',
        'refs/heads/main',
        String(result!['upstream']),
      );
      const again = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
      expect(again.code).toBe(3);
      expect(again.result).toMatchObject({ outcome: 'nothing-to-do' });
    }, 120_000);

    it('a clean merge needs no agent either: the host makes the merge commit', async () => {
      const s = await scenario();
      await commit(s.up, { 'b.txt': 'upstream\n' }, 'Upstream adds b');
      await commit(s.fork, { 'c.txt': 'fork\n' }, 'Fork adds c');
      const { code, result, err } = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
      expect(code, err).toBe(0);
      expect(result).toMatchObject({
        outcome: 'synced',
        agentRan: false,
        detail: expect.stringMatching(/^clean merge/),
      });
      const bare = gitea.git.dirOf('bot', s.name);
      const merged = String(result!['merged']);
      expect(await git(root, '--git-dir', bare, 'rev-list', '--parents', '-n', '1', merged)).toBe(
        `${merged} ${result!['fork']} ${result!['upstream']}`,
      );
    }, 120_000);

    it('a conflict the agent resolves becomes a PR with the proof; the agent has no remote and no credential', async () => {
      const s = await scenario();
      await commit(s.up, { 'a.txt': 'one\nTWO (upstream)\nthree\n' }, 'Upstream changes two');
      await commit(s.fork, { 'a.txt': 'one\ntwo (fork)\nthree\n' }, 'Fork changes two');
      const { code, result, err } = await forklift(s.checkout, [
        {
          do: 'sh',
          cmd: 'git remote -v > /harness-state/remotes.txt; env > /harness-state/env.txt',
        },
        {
          do: 'sh',
          cmd: 'git -c user.name=Agent -c user.email=a@x merge upstream/main > /harness-state/merge.txt 2>&1 || true',
        },
        {
          do: 'sh',
          cmd: "printf 'one\\nTWO (upstream) and two (fork)\\nthree\\n' > a.txt && git add a.txt && git -c user.name=Agent -c user.email=a@x commit -qm 'Merge upstream main' && printf 'ran: no tests found\\n' > /harness-state/report.md",
        },
      ]);
      expect(err).not.toContain(TOKEN);
      expect(code, `${err} ${JSON.stringify(result)}`).toBe(0);
      expect(result).toMatchObject({ outcome: 'synced', agentRan: true });
      const pr = gitea.issue(s.fork, result!.pr!.number);
      expect(pr.body).toContain('is an ancestor of the result');
      // The agent's words as text in a fence, never as live Markdown.
      expect(pr.body).toMatch(/```text\nran: no tests found\n```/);
      // The branch holds the agent's merge, and both sides.
      const head = await git(
        root,
        '--git-dir',
        gitea.git.dirOf('bot', s.name),
        'rev-parse',
        `refs/heads/${pr.pull!.headRef}`,
      );
      expect(head).toBe(result!['merged']);
      expect(
        await git(root, '--git-dir', gitea.git.dirOf('bot', s.name), 'show', `${head}:a.txt`),
      ).toContain('TWO (upstream) and two (fork)');
      const hs = join(result!.runDir, 'harness-state');
      expect(readFileSync(join(hs, 'remotes.txt'), 'utf8')).toBe('');
      expect(readFileSync(join(hs, 'env.txt'), 'utf8')).not.toContain(TOKEN);
    }, 180_000);

    /** forklift with these steps and flags on a conflicted fork; how long it took. */
    const timedOnConflict = async (steps: unknown[], flags: string[]) => {
      const s = await conflicted();
      const began = Date.now();
      const run = await forklift(s.checkout, steps, flags);
      return { s, ...run, ms: Date.now() - began };
    };

    it('STUCK.md: the stuck status, its preview, no PR', async () => {
      const s = await conflicted();
      const { code, result, err } = await forklift(s.checkout, [
        {
          do: 'sh',
          cmd: "printf '# Stuck\\n\\nThe two sides of a.txt cannot both hold.\\n' > STUCK.md",
        },
      ]);
      expect(code, err).toBe(4);
      expect(result).toMatchObject({
        outcome: 'stuck',
        stuck: expect.stringContaining('cannot both hold'),
      });
      expect(result!.pr).toBeUndefined();
    }, 180_000);

    it('a runaway agent is stopped at --timeout', async () => {
      const { code, result, err, ms } = await timedOnConflict(
        [{ do: 'sleep', ms: 120_000 }],
        ['--timeout', '3s'],
      );
      expect(code, err).toBe(5);
      expect(result).toMatchObject({ outcome: 'timed-out' });
      expect(ms).toBeLessThan(90_000);
    }, 180_000);

    it('an agent that fills its disk is stopped at --disk', async () => {
      const { s, code, result, err, ms } = await timedOnConflict(
        [
          { do: 'sh', cmd: 'dd if=/dev/zero of=/harness-state/fill bs=1M count=100 2>/dev/null' },
          { do: 'sleep', ms: 120_000 },
        ],
        ['--disk', '32m'],
      );
      expect(code, err).toBe(1);
      expect(result).toMatchObject({
        outcome: 'error',
        detail: expect.stringMatching(/disk limit/),
      });
      expect(ms).toBeLessThan(60_000);
      expect(await w.branches(s.name)).toBe('');
    }, 180_000);

    it('an agent that writes to a file it already deleted is stopped at --disk too', async () => {
      const s = await conflicted();
      const { code, result, err } = await forklift(
        s.checkout,
        [
          {
            do: 'sh',
            // No walk of the tree sees it; the filesystem's free space does.
            cmd: 'exec 3>/workspace/hidden; rm /workspace/hidden; dd if=/dev/zero bs=1M count=100 >&3 2>/dev/null; sleep 120',
          },
        ],
        ['--disk', '32m'],
      );
      expect(code, err).toBe(1);
      expect(result).toMatchObject({
        outcome: 'error',
        detail: expect.stringMatching(/disk limit/),
      });
    }, 180_000);

    it('an agent that only claims to have merged, or drops a fork commit, gets no push and no PR', async () => {
      const s = await conflicted();
      const liar = await forklift(s.checkout, [
        {
          do: 'sh',
          cmd: "git merge --abort 2>/dev/null; printf 'merged!\\n' > /harness-state/report.md; git -c user.name=A -c user.email=a@x commit -q --allow-empty -m 'Merged upstream (not really)'",
        },
      ]);
      expect(liar.code).toBe(6);
      expect(liar.result).toMatchObject({
        outcome: 'verification-failed',
        detail: expect.stringMatching(/did not merge/),
      });
      // The same upstream again: only --force tries once more.
      const dropper = await forklift(
        s.checkout,
        [{ do: 'sh', cmd: 'git reset -q --hard upstream/main' }],
        ['--force'],
      );
      expect(dropper.code).toBe(6);
      expect(dropper.result).toMatchObject({
        outcome: 'verification-failed',
        detail: expect.stringMatching(/fork commits would be lost/),
      });
      const branches = await git(
        root,
        '--git-dir',
        gitea.git.dirOf('bot', s.name),
        'branch',
        '--list',
        'forklift/*',
      );
      expect(branches).toBe('');
    }, 180_000);

    it('hostile workspace content has no effect on the host', async () => {
      const s = await conflicted();
      const canary = join(root, 'pwned');
      const hook = `#!/bin/sh\\ntouch ${canary}\\n`;
      const { code, result, err } = await forklift(s.checkout, [
        {
          do: 'sh',
          cmd: `for h in post-checkout pre-push reference-transaction post-merge; do printf '${hook}' > .git/hooks/$h; chmod +x .git/hooks/$h; done; git config core.fsmonitor 'touch ${canary}'; git config core.hooksPath .git/hooks; printf '* filter=evil\\n' > .gitattributes; git config filter.evil.clean 'touch ${canary}'; ln -s /etc/passwd STUCK.md`,
        },
      ]);
      // A STUCK.md that is a link is not followed: the run stops as stuck, saying so.
      expect(code, err).toBe(4);
      expect(result!['stuck']).toMatch(/was not read/);
      expect(String(result!['stuck'])).not.toContain('root:');
      expect(existsSync(canary)).toBe(false);
      mkdirSync(join(root, 'keep'), { recursive: true });
    }, 180_000);

    // The fork's tests, as FORK.md declares them, decide on the host's side.
    const LIB = {
      'lib.sh': 'greet() { echo "hello $1"; }\n',
      'test.sh':
        '. ./lib.sh\n[ "$(greet x)" = "hello x" ] || { echo FAIL greet; exit 1; }\nif [ -f fork.sh ]; then . ./fork.sh; [ "$(welcome y)" = "hello y!" ] || { echo FAIL welcome; exit 1; }; fi\necho ok\n',
    };
    const RENAMED = {
      'lib.sh': 'salute() { echo "hello $1"; }\n',
      'test.sh': LIB['test.sh']
        .replace('$(greet x)', '$(salute x)')
        .replace('FAIL greet', 'FAIL salute'),
    };
    const FORK = {
      'FORK.md': '# Our fork\n\nWe add welcome().\n\ntest: sh test.sh\n',
      'fork.sh': 'welcome() { echo "$(greet $1)!"; }\n',
    };
    const AS = 'git -c user.name=A -c user.email=a@x';

    it('a clean merge whose tests pass needs no agent; the host ran them and says so', async () => {
      const s = await scenario(LIB);
      await commit(s.fork, FORK, 'Fork adds welcome');
      await commit(s.up, { 'b.txt': 'b\n' }, 'Upstream adds b');
      const { code, result, err } = await forklift(s.checkout, [{ do: 'exit', code: 9 }]);
      expect(code, err).toBe(0);
      expect(result).toMatchObject({ outcome: 'synced', agentRan: false, tests: { ok: true } });
      expect(gitea.issue(s.fork, result!.pr!.number).body).toMatch(
        /the fork's tests \(`sh test.sh`\).*passed/,
      );
    }, 180_000);

    it('a semantic conflict (clean merge, red tests) goes to the agent; its fix is tested before the PR, a wrong one gets none', async () => {
      const s = await scenario(LIB);
      await commit(s.fork, FORK, 'Fork adds welcome');
      await commit(s.up, RENAMED, 'Upstream renames greet to salute');
      const merge = `${AS} merge -q --no-edit upstream/main`;
      // Told the tests fail, it merges but does not fix the fork's call: the host's tests catch it.
      const wrong = await forklift(s.checkout, [
        { do: 'sh', cmd: `grep -q 'FAIL welcome' /harness-state/prompt.md && ${merge}` },
      ]);
      expect(wrong.code, wrong.err).toBe(6);
      expect(wrong.result).toMatchObject({
        outcome: 'verification-failed',
        agentRan: true,
        tests: { ok: false },
        detail: expect.stringMatching(/tests fail/),
      });
      expect(await w.branches(s.name)).toBe('');
      const right = await forklift(
        s.checkout,
        [
          {
            do: 'sh',
            cmd: `${merge} && sed -i 's/greet/salute/' fork.sh && ${AS} commit -qam 'fork.sh: call salute, upstream renamed greet'`,
          },
        ],
        ['--force'],
      );
      expect(right.code, right.err).toBe(0);
      expect(right.result).toMatchObject({
        outcome: 'synced',
        agentRan: true,
        tests: { ok: true },
        beyondMerge: ['fork.sh'],
      });
      const body = gitea.issue(s.fork, right.result!.pr!.number).body;
      expect(body).toMatch(
        /```text\nno textual conflict\n\nchanged beyond the conflicts \(review these\):\nfork.sh\n```/,
      );
      expect(body).toMatch(/the fork's tests \(`sh test.sh`\).*passed/);
    }, 240_000);

    it('a change beyond the conflicts that the tests do not need is refused; one they need is taken', async () => {
      const s = await scenario({ ...LIB, 'a.txt': 'x\n' });
      await commit(s.fork, { ...FORK, 'a.txt': 'fork\n' }, 'Fork');
      await commit(s.up, { 'a.txt': 'upstream\n' }, 'Upstream');
      const resolve = `${AS} merge -q upstream/main; printf 'both\\n' > a.txt`;
      // It resolves the conflict and, while at it, adds a function of its own to the fork's file.
      const extra = await forklift(s.checkout, [
        {
          do: 'sh',
          cmd: `${resolve} && printf 'collect() { :; }\\n' >> fork.sh && git add -A && ${AS} commit -qm merge`,
        },
      ]);
      expect(extra.code, extra.err).toBe(6);
      expect(extra.result!['detail']).toMatch(
        /changed fork\.sh beyond the merge's conflicts, and the fork's tests pass without those changes/,
      );
      expect(await w.branches(s.name)).toBe('');
    }, 240_000);

    it("CI and protected files are never the agent's: a result that writes them is refused", async () => {
      const s = await scenario({ ...LIB, 'a.txt': 'x\n' });
      await commit(s.fork, { 'FORK.md': 'protect: test.sh\n', 'a.txt': 'fork\n' }, 'Fork');
      await commit(s.up, { 'a.txt': 'upstream\n' }, 'Upstream');
      const resolve = `${AS} merge -q upstream/main; printf 'both\\n' > a.txt`;
      const ci = await forklift(s.checkout, [
        {
          do: 'sh',
          cmd: `${resolve} && mkdir -p .gitea/workflows && printf 'on: push\\njobs: {}\\n' > .gitea/workflows/steal.yml && git add -A && ${AS} commit -qm merge`,
        },
      ]);
      expect(ci.code, ci.err).toBe(6);
      expect(ci.result!['detail']).toMatch(
        /CI or protected files \(\.gitea\/workflows\/steal\.yml\)/,
      );
      const tests = await forklift(
        s.checkout,
        [
          {
            do: 'sh',
            cmd: `${resolve} && echo 'exit 0' > test.sh && git add -A && ${AS} commit -qm merge`,
          },
        ],
        ['--force'],
      );
      expect(tests.code, tests.err).toBe(6);
      expect(tests.result!['detail']).toMatch(/\(test\.sh\)/);
      expect(await w.branches(s.name)).toBe('');
      // The same resolution without them is proposed.
      const fine = await forklift(
        s.checkout,
        [{ do: 'sh', cmd: `${resolve} && git add -A && ${AS} commit -qm merge` }],
        ['--force'],
      );
      expect(fine.code, fine.err).toBe(0);
    }, 240_000);
  },
);
