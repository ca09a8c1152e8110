import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { settledCode as code, isBbError } from '@bb/errors';
import { afterEach, describe, expect, it } from 'vitest';
import type { ParsedWebhook } from '../events';
import type { Forge } from '../forge';
import type { ForgeKind, WebhookScheme } from '../kind';

/** One webhook delivery in the forge's own format, and what it must parse to. */
export interface WebhookFixture {
  name: string;
  headers: Record<string, string>;
  body: Uint8Array | string;
  secret: string;
  /** Fields the parsed event must have (compared with `toMatchObject`). */
  expect: Partial<Record<string, unknown>> & { kind: ParsedWebhook['kind'] };
}

/**
 * A freshly seeded repository for one test. The forge acts as `bot`, a member of
 * `org`; `issue` is an open issue (not a PR) labelled and assigned to `bot`.
 */
export interface ForgeConformanceWorld {
  forge: Forge;
  bot: string;
  org: string;
  /** Another member of `org`. */
  member: string;
  /** A user who is not a member of `org`. */
  nonMember: string;
  issue: number;
  issueTitle: string;
  /** A label on `issue`. */
  issueLabel: string;
  /** The default branch. */
  base: string;
  /** Push a branch with one new commit (as the bottle's sidecar would). */
  pushBranch: (branch: string) => Promise<void>;
  /** Merge a PR as a maintainer, when the forge can do it here. */
  merge?: (pr: number) => Promise<void>;
  /**
   * Submit a review of `pr` as `member` (a person, not the forge's user), with
   * inline comments on lines of files the PR changes.
   */
  review: (
    pr: number,
    input: {
      state: 'approved' | 'changes_requested' | 'commented';
      body: string;
      comments: Array<{ path: string; line: number; body: string }>;
    },
  ) => Promise<void>;
  /** The file `pushBranch` changes (inline review comments go on it). */
  changedFile: string;
  /** The forge's own webhook deliveries, checked with `webhook`. */
  webhooks?: WebhookFixture[];
  /** The kind's webhook scheme (`kind.webhook`), which `webhooks` are checked with. */
  webhook?: WebhookScheme;
  /** The forge's kind: its bottle branches are checked. */
  kind?: ForgeKind;
  dispose?: () => Promise<void> | void;
}

export interface ForgeConformanceOptions {
  create: () => Promise<ForgeConformanceWorld> | ForgeConformanceWorld;
  /** Tests to skip, by name, with the reason shown in the report. */
  skip?: { reason: string; tests: string[] };
}

const run = promisify(execFile);

/** The behaviour every `Forge` subclass must have. */
export function describeForgeConformance(name: string, options: ForgeConformanceOptions): void {
  describe(`Forge conformance: ${name}`, () => {
    let current: ForgeConformanceWorld | undefined;
    afterEach(async () => {
      await current?.dispose?.();
      current = undefined;
    });
    const make = async () => {
      current = await options.create();
      return current;
    };
    /** Push the issue's bottle branch and open a PR from it: the PR. */
    const openBottlePr = async (w: ForgeConformanceWorld, title: string, body: string) => {
      const head = `bb/implementer-${w.issue}`;
      await w.pushBranch(head);
      return w.forge.openPr({ head, base: w.base, title, body });
    };
    // A test whose world lacks what it needs is skipped with the reason shown, never
    // passed without checking anything.
    const test = (
      title: string,
      fn: (skip: (reason: string) => never) => Promise<void>,
      timeout?: number,
    ) => {
      if (options.skip?.tests.includes(title))
        it.skip(`${title} (skipped: ${options.skip.reason})`, () => {});
      else it(title, (ctx) => fn((reason) => ctx.skip(reason) as never), timeout);
    };

    test('readIssue returns the issue with its labels and assignees', async () => {
      const w = await make();
      const issue = await w.forge.readIssue(w.issue);
      expect(issue.number).toBe(w.issue);
      expect(issue.title).toBe(w.issueTitle);
      expect(issue.state).toBe('open');
      expect(issue.isPullRequest).toBe(false);
      expect(issue.labels.map((l) => l.name)).toContain(w.issueLabel);
      expect(issue.assignees.map((a) => a.login)).toContain(w.bot);
      expect(typeof issue.url).toBe('string');
    });

    test('missing issues and PRs are NOT_FOUND for every read and write', async () => {
      const w = await make();
      const missing = 9999;
      expect(await code(w.forge.readIssue(missing))).toBe('NOT_FOUND');
      expect(await code(w.forge.readPr(missing))).toBe('NOT_FOUND');
      expect(await code(w.forge.readComments(missing))).toBe('NOT_FOUND');
      expect(await code(w.forge.postComment(missing, 'hello'))).toBe('NOT_FOUND');
      expect(await code(w.forge.updateDescription(missing, 'x'))).toBe('NOT_FOUND');
    });

    test('listOpenIssues lists the open issue with its labels and no PRs', async () => {
      const w = await make();
      const pr = await openBottlePr(w, 'A PR', '');
      const open = await w.forge.listOpenIssues();
      const mine = open.find((i) => i.number === w.issue);
      expect(mine?.labels.map((l) => l.name)).toContain(w.issueLabel);
      expect(mine?.assignees.map((a) => a.login)).toContain(w.bot);
      expect(open.some((i) => i.number === pr.number)).toBe(false);
      expect(open.every((i) => i.state === 'open' && !i.isPullRequest)).toBe(true);
    });

    test('a plain issue is not a PR', async () => {
      const w = await make();
      expect(await code(w.forge.readPr(w.issue))).toBe('NOT_FOUND');
      expect(await w.forge.getPrForIssue(w.issue)).toBeUndefined();
    });

    test('postComment posts as the forge user and readComments lists oldest first', async () => {
      const w = await make();
      const first = await w.forge.postComment(w.issue, 'first comment');
      const second = await w.forge.postComment(w.issue, 'second <b>&</b> comment');
      expect(first.body).toBe('first comment');
      expect(first.author.login).toBe(w.bot);
      expect(second.id).not.toBe(first.id);
      const all = await w.forge.readComments(w.issue);
      const mine = all.filter((c) => c.id === first.id || c.id === second.id);
      expect(mine.map((c) => c.body)).toEqual(['first comment', 'second <b>&</b> comment']);
      expect(all.indexOf(all.find((c) => c.id === first.id)!)).toBeLessThan(
        all.indexOf(all.find((c) => c.id === second.id)!),
      );
    });

    test('updateDescription replaces the body', async () => {
      const w = await make();
      await w.forge.updateDescription(w.issue, 'new body\n\nwith lines');
      expect((await w.forge.readIssue(w.issue)).body).toBe('new body\n\nwith lines');
    });

    test('openPr opens a PR that is linked to its issue and readable as a PR', async () => {
      const w = await make();
      const pr = await openBottlePr(w, 'Fix it', `Fixes #${w.issue}\n\nDetails.`);
      expect(pr.state).toBe('open');
      expect(pr.merged).toBe(false);
      expect(pr.mergedAt).toBeNull();
      expect(pr.head.ref).toBe(`bb/implementer-${w.issue}`);
      expect(pr.base.ref).toBe(w.base);
      expect(pr.author.login).toBe(w.bot);
      const again = await w.forge.readPr(pr.number);
      expect(again.number).toBe(pr.number);
      expect(again.title).toBe('Fix it');
      expect(await w.forge.isPrOpen(pr.number)).toBe(true);
      expect((await w.forge.readIssue(pr.number)).isPullRequest).toBe(true);
      expect(await w.forge.getPrForIssue(w.issue)).toBe(pr.number);
      // A PR takes comments and description edits like an issue.
      await w.forge.postComment(pr.number, 'on the PR');
      expect((await w.forge.readComments(pr.number)).map((c) => c.body)).toContain('on the PR');
      await w.forge.updateDescription(pr.number, `Fixes #${w.issue}\n\nUpdated.`);
      expect((await w.forge.readPr(pr.number)).body).toBe(`Fixes #${w.issue}\n\nUpdated.`);
    });

    test('a second open PR for the same branch is a CONFLICT', async () => {
      const w = await make();
      const head = `bb/implementer-${w.issue}`;
      await w.pushBranch(head);
      await w.forge.openPr({ head, base: w.base, title: 'one', body: `Fixes #${w.issue}` });
      expect(
        await code(w.forge.openPr({ head, base: w.base, title: 'two', body: `Fixes #${w.issue}` })),
      ).toBe('CONFLICT');
    });

    test('a PR from a branch that does not exist is refused', async () => {
      const w = await make();
      const c = await code(
        w.forge.openPr({ head: 'no-such-branch', base: w.base, title: 't', body: '' }),
      );
      expect(['NOT_FOUND', 'INVALID_INPUT']).toContain(c);
    });

    test('a merged PR reads as merged and closed', async (skip) => {
      const w = await make();
      if (!w.merge) return skip('the world has no merge helper (ForgeConformanceWorld.merge)');
      const pr = await openBottlePr(w, 'merge me', `Fixes #${w.issue}`);
      await w.merge(pr.number);
      const merged = await w.forge.readPr(pr.number);
      expect(merged.merged).toBe(true);
      expect(merged.state).toBe('closed');
      expect(merged.mergedAt).not.toBeNull();
      expect(merged.mergeCommitSha).toMatch(/^[0-9a-f]{7,64}$|^m+$/);
      expect(await w.forge.isPrOpen(pr.number)).toBe(false);
    });

    test("findPrs finds a branch's PRs into a base, open ones or all of them, newest first", async (skip) => {
      const w = await make();
      const unsupported = await code(w.forge.findPrs({ head: 'x', base: w.base }));
      if (unsupported === 'UNSUPPORTED')
        return skip('this forge cannot list PRs (findPrs): forklift cannot keep one sync PR on it');
      const head = `bb/implementer-${w.issue}`;
      expect(await w.forge.findPrs({ head, base: w.base, state: 'all' })).toEqual([]);
      await w.pushBranch(head);
      const first = await w.forge.openPr({ head, base: w.base, title: 'one', body: '' });
      await w.pushBranch('bb/other-1');
      await w.forge.openPr({ head: 'bb/other-1', base: w.base, title: 'other', body: '' });
      const open = await w.forge.findPrs({ head, base: w.base });
      expect(open.map((p) => [p.number, p.head.ref, p.state])).toEqual([
        [first.number, head, 'open'],
      ]);
      expect(await w.forge.findPrs({ head, base: 'no-such-base' })).toEqual([]);
      await w.forge.closeIssue(first.number);
      expect(await w.forge.findPrs({ head, base: w.base })).toEqual([]);
      const second = await w.forge.openPr({ head, base: w.base, title: 'two', body: '' });
      const all = await w.forge.findPrs({ head, base: w.base, state: 'all' });
      expect(all.map((p) => [p.number, p.state])).toEqual([
        [second.number, 'open'],
        [first.number, 'closed'],
      ]);
    });

    test('openIssue opens an issue as the token user (whoami), closeIssue closes it', async (skip) => {
      const w = await make();
      if ((await code(w.forge.whoami())) === 'UNSUPPORTED')
        return skip('this forge cannot say who its token is (whoami) nor open issues');
      expect(await w.forge.whoami()).toBe(w.bot);
      const issue = await w.forge.openIssue({ title: 'forklift is stuck', body: 'why' });
      expect([issue.title, issue.body, issue.state, issue.author.login]).toEqual([
        'forklift is stuck',
        'why',
        'open',
        w.bot,
      ]);
      expect((await w.forge.listOpenIssues()).some((i) => i.number === issue.number)).toBe(true);
      await w.forge.closeIssue(issue.number);
      expect((await w.forge.readIssue(issue.number)).state).toBe('closed');
      expect(await code(w.forge.openIssue({ title: ' ', body: '' }))).toBe('INVALID_INPUT');
      expect(await code(w.forge.closeIssue(9999))).toBe('NOT_FOUND');
    });

    test('readReviews lists submitted reviews oldest first; readReviewComments their inline comments', async () => {
      const w = await make();
      const pr = await openBottlePr(w, 'Review me', '');
      expect(await w.forge.readReviews(pr.number)).toEqual([]);
      await w.review(pr.number, {
        state: 'changes_requested',
        body: 'Two things.',
        comments: [
          { path: w.changedFile, line: 1, body: 'Say why here.' },
          { path: w.changedFile, line: 1, body: 'And <b>&</b> here.' },
        ],
      });
      await w.review(pr.number, { state: 'approved', body: 'Good now.', comments: [] });
      const reviews = await w.forge.readReviews(pr.number);
      expect(reviews.map((r) => [r.state, r.body, r.author.login])).toEqual([
        ['changes_requested', 'Two things.', w.member],
        ['approved', 'Good now.', w.member],
      ]);
      const inline = await w.forge.readReviewComments(pr.number, reviews[0]!.id);
      expect(inline.map((c) => [c.path, c.line, c.body, c.reviewId])).toEqual([
        [w.changedFile, 1, 'Say why here.', reviews[0]!.id],
        [w.changedFile, 1, 'And <b>&</b> here.', reviews[0]!.id],
      ]);
      expect(await w.forge.readReviewComments(pr.number, reviews[1]!.id)).toEqual([]);
      expect(await code(w.forge.readReviews(9999))).toBe('NOT_FOUND');
      expect(await code(w.forge.readReviews(w.issue))).toBe('NOT_FOUND');
      expect(await code(w.forge.readReviewComments(pr.number, 999_999))).toBe('NOT_FOUND');
    });

    test('permissionOf tells a writer, and never calls someone it cannot judge a writer', async () => {
      const w = await make();
      expect(['write', 'admin']).toContain(await w.forge.permissionOf(w.bot));
      // A forge that may not ask answers FORBIDDEN ("cannot tell"), never a guess.
      const outsider = await w.forge.permissionOf(w.nonMember).catch((err) => {
        if (isBbError(err, 'FORBIDDEN')) return 'cannot tell';
        throw err;
      });
      expect(['none', 'read', 'cannot tell']).toContain(outsider);
      expect(await code(w.forge.permissionOf(''))).toBe('INVALID_INPUT');
    });

    test('isOrgMember tells members from non-members', async () => {
      const w = await make();
      expect(await w.forge.isOrgMember(w.org, w.bot)).toBe(true);
      expect(await w.forge.isOrgMember(w.org, w.member)).toBe(true);
      expect(await w.forge.isOrgMember(w.org, w.nonMember)).toBe(false);
    });

    test('bad arguments are INVALID_INPUT', async () => {
      const w = await make();
      for (const n of [0, -1, 1.5, Number.NaN]) {
        expect(await code(w.forge.readIssue(n))).toBe('INVALID_INPUT');
      }
      expect(await code(w.forge.postComment(w.issue, ''))).toBe('INVALID_INPUT');
      expect(await code(w.forge.openPr({ head: 'x', base: w.base, title: '', body: '' }))).toBe(
        'INVALID_INPUT',
      );
    });

    test('webhooks verify with the secret, fail on any change, and parse to the right event', async (skip) => {
      const w = await make();
      if (!w.webhook) skip('the world has no webhook scheme (ForgeConformanceWorld.webhook)');
      if (!w.webhooks?.length)
        skip('the world has no webhook fixtures (ForgeConformanceWorld.webhooks)');
      const hooks = w.webhook!;
      for (const fx of w.webhooks ?? []) {
        const body = typeof fx.body === 'string' ? Buffer.from(fx.body) : Buffer.from(fx.body);
        expect(hooks.verify(fx.headers, body, [fx.secret]), `${fx.name} verifies`).toBe(true);
        expect(
          hooks.verify(fx.headers, body, [`${fx.secret}x`]),
          `${fx.name} with a wrong secret`,
        ).toBe(false);
        expect(hooks.verify(fx.headers, body, ['']), `${fx.name} with an empty secret`).toBe(false);
        expect(hooks.verify(fx.headers, body, []), `${fx.name} with no secret`).toBe(false);
        // While a secret is changed, the old and the new one are both accepted.
        expect(
          hooks.verify(fx.headers, body, [`${fx.secret}-new`, fx.secret]),
          `${fx.name} with its secret second of two`,
        ).toBe(true);
        for (const at of [0, Math.floor(body.length / 2), body.length - 1]) {
          const changed = Buffer.from(body);
          changed[at] = changed[at]! ^ 0x01;
          expect(
            hooks.verify(fx.headers, changed, [fx.secret]),
            `${fx.name} with byte ${at} changed`,
          ).toBe(false);
        }
        const event = hooks.parse(fx.headers, body);
        expect(event, fx.name).toMatchObject(fx.expect);
        if (event.kind !== 'ignored') {
          expect(event.key.length, `${fx.name} has a dedupe key`).toBeGreaterThan(0);
          expect(hooks.parse(fx.headers, body)).toEqual(event);
        }
      }
      expect(hooks.path, 'the webhook path').toMatch(/^\/[A-Za-z0-9/_-]+$/);
    });

    test('a malformed webhook body is INVALID_INPUT', async (skip) => {
      const w = await make();
      const fx = w.webhooks?.[0];
      if (!w.webhook)
        return skip('the world has no webhook scheme (ForgeConformanceWorld.webhook)');
      if (!fx) return skip('the world has no webhook fixtures (ForgeConformanceWorld.webhooks)');
      let thrown: unknown;
      try {
        w.webhook.parse(fx.headers, '{"truncated": ');
      } catch (err) {
        thrown = err;
      }
      expect(isBbError(thrown, 'INVALID_INPUT')).toBe(true);
    });

    test('gitRemote takes a real push, and a PR opens from the branch pushed', async (skip) => {
      const w = await make();
      const remote = w.forge.gitRemote();
      if (!remote) return skip('the forge cannot push (gitRemote() is undefined)');
      const dir = await mkdtemp(join(tmpdir(), 'bb-forge-push-'));
      try {
        const git = (...args: string[]) =>
          run('git', ['-C', dir, ...args], {
            env: {
              ...process.env,
              GIT_TERMINAL_PROMPT: '0',
              GIT_CONFIG_NOSYSTEM: '1',
              GIT_CONFIG_GLOBAL: '/dev/null',
              GIT_AUTHOR_NAME: 'conformance',
              GIT_AUTHOR_EMAIL: 'conformance@example.invalid',
              GIT_COMMITTER_NAME: 'conformance',
              GIT_COMMITTER_EMAIL: 'conformance@example.invalid',
            },
          });
        const auth = Object.entries(remote.headers).flatMap(([k, v]) => [
          '-c',
          `http.extraHeader=${k}: ${v}`,
        ]);
        await git('init', '-q', '-b', w.base);
        await git(...auth, 'fetch', '-q', '--depth=1', remote.url, w.base);
        await git('checkout', '-q', '-B', 'work', 'FETCH_HEAD');
        await writeFile(join(dir, 'pushed-by-conformance.txt'), 'pushed through gitRemote\n');
        await git('add', '-A');
        await git('commit', '-q', '-m', 'conformance: push through gitRemote');
        const branch = `bb/implementer-${w.issue}`;
        await git(...auth, 'push', '-q', remote.url, `HEAD:refs/heads/${branch}`);
        const sha = (await git('rev-parse', 'HEAD')).stdout.trim();
        const pr = await w.forge.openPr({ head: branch, base: w.base, title: 'pushed', body: '' });
        expect((await w.forge.readPr(pr.number)).head).toMatchObject({ ref: branch, sha });
        // The credential travels in the headers, never in the URL.
        expect(remote.url).not.toMatch(/\/\/[^/]*@/);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }, 30_000);

    test("the kind's bottle branch names the issue and nothing else is one", async (skip) => {
      const w = await make();
      if (!w.kind) return skip('the world names no forge kind (ForgeConformanceWorld.kind)');
      const branch = w.kind.bottleBranch('implementer', w.issue);
      expect(w.kind.issueOfBranch(branch)).toBe(w.issue);
      expect(w.kind.issueOfBranch(w.base)).toBeUndefined();
      expect(w.kind.issueOfBranch(`${branch}/x`)).toBeUndefined();
    });
  });
}
