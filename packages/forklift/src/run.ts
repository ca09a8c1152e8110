import { mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { BbError, errorMessage, registerSecret } from '@bb/errors';
import type { Forge } from '@bb/forge';
import type { Backend } from '@bb/headless';
import { LABEL } from '@bb/names';
import { runGit, setRef, wallGitEnv } from '@bb/wall';
import type { AgentChoice } from './agent';
import { checkAgentResult } from './check-result';
import { decide } from './decide';
import { mergeByAgent } from './merge-agent';
import { withoutBeyond } from './minimal';
import { OUTCOMES, type Outcome } from './outcomes';
import { findMergeablePrefix } from './partial';
import { forkWorkProof, pathLists, syncBody, syncTitle, testsField, testsProof } from './pr-body';
import { agentPrompt } from './prompt';
import { fenced, plain, pushSync } from './propose';
import { recordRun, scrub } from './record';
import { forkForge, parseRemote, type RemoteRepo } from './remotes';
import { recordSquash } from './squash';
import { ownHead, squashWarning, statePath, syncBranchFor } from './sync-state';
import { parseForkMd, runTests, type TestRun } from './verify';
import { FORKLIFT_IDENTITY, prepareVerifyRepo, short } from './verify-repo';

export { OUTCOMES, type Outcome };

export interface ForkliftOptions {
  /** The fork's checkout, with `origin` and `upstream` remotes. */
  checkout: string;
  env: Record<string, string | undefined>;
  backend: Backend;
  /** The agent's (and the tests') image. @default forklift/kitchen-sink:latest */
  image?: string;
  /** The host kills the agent after this long, whatever it does. @default 8 min */
  timeoutMs?: number;
  /** The limit of one run of the fork's tests on the host's side. @default 5 min */
  testTimeoutMs?: number;
  /** Which agent merges, its model access and its egress allowlist. */
  agent: AgentChoice;
  /** Secrets the credential proxy reads besides `env` (a derived bearer header). */
  agentSecrets?: Record<string, string>;
  /** The most the agent may write to its workspace and home (they are on the host's disk). @default 10 GiB */
  diskBytes?: number;
  /** The most the agent's result may add to the host's verification repository. @default 1 GiB */
  maxImportBytes?: number;
  /** The forge token for the push and the PR (never given to the agent). */
  token: string;
  /** The fork's forge. @default the kind registry's (see `forkForge`): Gitea at FORKLIFT_API or <origin web base>/api/v1 */
  forgeFor?: (remote: RemoteRepo) => Forge;
  /** The branch both sides are merged on. @default main */
  branch?: string;
  /** Run even when upstream and FORK.md are as the last run saw them, and remake an open sync PR. */
  force?: boolean;
  /** Open, update and close an issue on the fork when a run leaves it behind. @default true */
  notify?: boolean;
  onProgress?: (line: string) => void;
  now?: () => Date;
}

export interface ForkliftResult {
  outcome: Outcome;
  exitCode: number;
  project: string;
  detail: string;
  upstream: string;
  fork: string;
  merged?: string;
  pr?: { number: number; url: string; branch: string; updated?: boolean };
  /** The fork's issue that says the sync needs a person (opened or updated by this run). */
  issue?: number;
  /** What the run noticed that a person should know (a squash-merged sync PR, ...). */
  warnings?: string[];
  /** A partial sync: the upstream commit merged up to, and the first one not taken. */
  partial?: { upTo: string; taken: number; total: number; blocker: string };
  /** The fork's own changes that were looked for in the result. */
  forkWork?: { checked: number; reverted: string[]; reworked: string[] };
  /** The first lines of STUCK.md, as text (never followed through a link). */
  stuck?: string;
  /** The fork's tests as the host ran them on the result (FORK.md `test:`). */
  tests?: { ok: boolean; exitCode: number; timedOut: boolean; durationMs: number };
  /** Paths the agent changed beyond resolving the merge's conflicts. */
  beyondMerge?: string[];
  /** The agent CLI's own account (logged; never trusted). */
  agent?: { name: string; ok: boolean; error?: string | undefined };
  runDir: string;
  agentRan: boolean;
  durationMs: number;
  startedAt: string;
}

/** `$XDG_STATE_HOME/forklift/runs` (default `~/.local/state/forklift/runs`). */
export function runsDir(env: Record<string, string | undefined>): string {
  const state = env['XDG_STATE_HOME'] || join(env['HOME'] || homedir(), '.local', 'state');
  return join(state, 'forklift', 'runs');
}

const stamp = (d: Date) => d.toISOString().replace(/[-:]/g, '').replace('T', '_').slice(0, 15);

/**
 * Sync the fork in `checkout` with its upstream: fetch both; nothing to do, a
 * fast-forward or a clean merge (green when the fork declares tests) is turned
 * into a PR by the host alone; otherwise an agent merges in a container with no
 * remotes and no credentials, for at most `timeoutMs`, and the host decides:
 * STUCK.md, or its result verified (every upstream and fork commit reachable, the
 * fork's own changes not undone, CI and protected files no one's but the two
 * sides', the fork's tests green, all read as data in a repository of the host's)
 * and only then pushed to the one sync branch and proposed in the one sync PR.
 * Nothing is pushed, opened or run when upstream has not moved since the run that
 * proposed it, or (a run that left the fork behind) when neither upstream nor
 * FORK.md changed, unless `force`.
 */
export async function runForklift(o: ForkliftOptions): Promise<ForkliftResult> {
  const started = (o.now ?? (() => new Date()))();
  const t0 = Date.now();
  const branch = o.branch ?? 'main';
  const sync = syncBranchFor(branch);
  const say = o.onProgress ?? (() => {});
  const image = o.image ?? 'forklift/kitchen-sink:latest';
  registerSecret(o.token);
  const host = (args: string[], timeoutMs = 300_000) =>
    runGit(['-C', o.checkout, ...args], { env: operatorEnv(o.env), timeoutMs });
  const remoteUrl = async (name: string) =>
    (await host(['remote', 'get-url', name])).trim() || Promise.reject(new Error('an empty URL'));
  const noRemote = (name: string) => () => {
    throw new BbError(
      'INVALID_INPUT',
      `${o.checkout} has no ${name} remote: run forklift in a fork's checkout (git remote add ${name} URL)`,
    );
  };
  const gitDir = (
    await host(['rev-parse', '--path-format=absolute', '--git-common-dir']).catch(() => {
      throw new BbError(
        'INVALID_INPUT',
        `${o.checkout} is not in a git repository: run forklift in a fork's checkout`,
      );
    })
  ).trim();
  // git in the verification repository (ours): a fixed configuration, the minimal environment.
  const verify = () => join(runDir, 'verify.git');
  const verifyGit = (args: string[], config: Array<[string, string]> = []) =>
    runGit(['--git-dir', verify(), ...args], { env: wallGitEnv({ config }), timeoutMs: 600_000 });
  // The fork is where the PR goes, so origin names a forge repository; upstream is only
  // fetched (any URL git fetches: a forge, a local path, file://).
  const origin = parseRemote('origin', await remoteUrl('origin').catch(noRemote('origin')));
  await remoteUrl('upstream').catch(noRemote('upstream'));
  const project = `${origin.owner}-${origin.repo}`.replace(/[^A-Za-z0-9._-]/g, '_');
  say('fetching origin and upstream');
  const fetch = (remote: string, ref: string) =>
    host([
      'fetch',
      '--quiet',
      '--no-tags',
      remote,
      `+refs/heads/${ref}:refs/remotes/${remote}/${ref}`,
    ]);
  await fetch('origin', branch);
  await fetch('upstream', branch);
  const sha = async (ref: string) =>
    (await host(['rev-parse', '--verify', `${ref}^{commit}`])).trim();
  const published = await sha(`refs/remotes/origin/${branch}`);
  const upstream = await sha(`refs/remotes/upstream/${branch}`);
  const ancestor = (a: string, b: string) =>
    host(['merge-base', '--is-ancestor', a, b]).then(
      () => true,
      () => false,
    );
  const forkMd = await host(['rev-parse', '--verify', '--quiet', `${published}:FORK.md`]).then(
    (s) => s.trim(),
    () => '',
  );
  // Every run has its directory (its result is kept there for `forklift runs`).
  // Two runs in one second (cron and a person) each get their own directory.
  mkdirSync(runsDir(o.env), { recursive: true, mode: 0o700 });
  let runId = stamp(started);
  // Made here and nowhere else: mkdir fails when another run took the name first.
  for (let i = 2; ; i++) {
    try {
      // The host's: the agent's files in it are no one else's business.
      mkdirSync(join(runsDir(o.env), `${project}_${runId}`), { mode: 0o700 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || i > 1000) throw err;
      runId = `${stamp(started)}-${i}`;
    }
  }
  const runDir = join(runsDir(o.env), `${project}_${runId}`);
  const name = `forklift-${project}-${runId}`
    .toLowerCase()
    .replace(/[^a-z0-9_.-]/g, '-')
    .slice(0, 100);
  // Forklift's own label: no orchestrator sharing the engine takes these containers for its bottles.
  const labels = { [LABEL.slug]: name, 'forklift.run': name };
  const warnings: string[] = [];
  const warn = (line: string) => {
    warnings.push(line);
    say(`warning: ${line}`);
  };
  const base = {
    project,
    upstream,
    fork: published,
    startedAt: started.toISOString(),
    agentRan: false,
    runDir,
  };
  const forge = (o.forgeFor ?? forkForge(o))(origin);
  const stateFile = statePath(
    runsDir(o.env),
    project,
    branch,
    `${origin.webBase}/${origin.owner}/${origin.repo}`,
  );
  const notify = o.notify !== false;
  // What the fork's readers never see of the host's (in issues and PR bodies).
  const hostPaths: Record<string, string> = {
    [runDir]: '<run directory>',
    [runsDir(o.env)]: '<runs>',
    [o.checkout]: '<checkout>',
    [gitDir]: '<checkout>/.git',
    ...(o.env['HOME'] ? { [o.env['HOME']]: '~' } : {}),
  };
  /** The run's result, recorded (state, the fork's trouble issue) as its outcome says. */
  const done = async (
    r: Omit<ForkliftResult, 'durationMs' | keyof typeof base> & Partial<typeof base>,
  ): Promise<ForkliftResult> => {
    const result: ForkliftResult = {
      ...base,
      ...r,
      ...(warnings.length ? { warnings } : {}),
      durationMs: 0,
    };
    await recordRun(result, {
      forge,
      branch,
      upstream,
      fork: published,
      forkMd,
      runDir,
      stateFile,
      hostPaths,
      notify,
      warn,
    });
    if (warnings.length) result.warnings = warnings;
    result.durationMs = Date.now() - t0;
    return result;
  };
  let pushed: string | undefined;
  try {
    const decided = await decide({
      forge,
      branch,
      sync,
      upstream,
      published,
      forkMd,
      stateFile,
      notify,
      force: !!o.force,
      ancestor,
      fetchSync: () =>
        fetch('origin', sync).then(
          () => sha(`refs/remotes/origin/${sync}`),
          () => undefined,
        ),
      warn,
    });
    if ('outcome' in decided) return done(decided);
    const { prs, state } = decided;
    // The fork's rules as its maintainer wrote them on origin: the agent's copy of FORK.md counts for nothing.
    const forkMdText = forkMd ? await host(['cat-file', 'blob', forkMd]).catch(() => '') : '';
    const rules = parseForkMd(forkMdText);
    // The token's git never runs in a repository with someone's config or hooks: pushes go
    // from a bare repository of ours holding the two published branches' objects and
    // nothing else of the checkout: borrowing the checkout's store would let an agent's
    // merge name a commit of the operator's that was never published, and have it pass
    // and be pushed (I10).
    say('copying the published branches into the verification repository');
    await prepareVerifyRepo({ verify: verify(), gitDir, branch, fork: published, upstream });
    const inVerify = (a: string, b: string) =>
      verifyGit(['merge-base', '--is-ancestor', a, b]).then(
        () => true,
        () => false,
      );
    const commitTree = async (tree: string, parents: string[], message: string) =>
      (
        await runGit(
          [
            '--git-dir',
            verify(),
            'commit-tree',
            tree,
            ...parents.flatMap((p) => ['-p', p]),
            '-m',
            message,
          ],
          { env: { ...wallGitEnv(), ...FORKLIFT_IDENTITY }, timeoutMs: 300_000 },
        )
      ).trim();
    // The fork's side: its branch, or forklift's record that a squash-merged sync PR took upstream's changes.
    let fork = published;
    let recorded: string | undefined;
    // The newest merged sync PR (or, its branch gone, the last one forklift opened).
    const lastMerged =
      prs.merged ??
      (state?.pr && !prs.open
        ? await forge.readPr(state.pr).then(
            (p) => (p.merged ? p : undefined),
            () => undefined,
          )
        : undefined);
    if (lastMerged) {
      const found = await recordSquash({
        pr: lastMerged,
        forge,
        verify: verify(),
        branch,
        published,
        upstream,
        commitTree,
      }).catch((err) => {
        say(
          `could not read PR #${lastMerged.number}'s head to check how it merged: ${errorMessage(err)}`,
        );
        return { kind: 'none' as const };
      });
      if (found.kind === 'recorded') {
        fork = found.commit;
        recorded = `- recorded upstream \`${short(found.upstream)}\` as merged (PR #${lastMerged.number} was merged without its history; merging that commit into \`${branch}\` changes no file, so the record changes none)`;
        warn(squashWarning(lastMerged, short(found.upstream)));
      } else if (found.kind === 'unrecordable')
        warn(
          `PR #${lastMerged.number} was merged without its history (squash or rebase), and forklift cannot record it: ${found.why}. This merge meets upstream's commits up to ${short(found.upstream)} again. To record them by hand once ${branch} holds their changes: git merge -s ours ${found.upstream} on ${branch}. Merge forklift's PRs with a merge commit.`,
        );
    }
    // Both sides are known to it (imported, as importHead counts): an import of the agent's
    // result adds only the agent's objects.
    for (const c of new Set([published, fork, upstream]))
      setRef(verify(), `refs/bb/imported/${c}`, c);
    const tests = async (commit: string, what: string): Promise<TestRun | undefined> => {
      if (!rules.test) return undefined;
      say(`running the fork's tests on ${what}: ${rules.test}`);
      const r = await runTests({
        backend: o.backend,
        image,
        gitDir: verify(),
        commit,
        command: rules.test,
        dir: join(runDir, 'tested'),
        name: `${name}-tests`,
        labels: { ...labels, [LABEL.role]: 'forklift-tests' },
        timeoutMs: o.testTimeoutMs ?? 5 * 60_000,
        diskBytes: o.diskBytes ?? 10 * 1024 ** 3,
      });
      say(`tests ${r.ok ? 'passed' : r.timedOut ? 'timed out' : `failed (exit ${r.exitCode})`}`);
      return r;
    };
    const testProof = (r: TestRun | undefined) => testsProof(rules.test, r);
    const propose = async (merged: string, how: string, proof: string[], upTo = upstream) => {
      const own = ownHead(state, prs.open);
      await pushSync(
        forge,
        verify(),
        merged,
        sync,
        async (tip) =>
          tip === own ||
          // A tip already in the fork's branch (a merged sync) loses nothing when replaced.
          (await verifyGit(['merge-base', '--is-ancestor', tip, published]).then(
            () => true,
            () => false,
          )),
      );
      pushed = sync;
      const body = syncBody({
        branch,
        upstream: upTo,
        fork: published,
        merged,
        how,
        proof: [...(recorded ? [recorded] : []), ...proof],
        warnings,
        seconds: Math.round((Date.now() - t0) / 1000),
      });
      if (prs.open) {
        await forge.updateDescription(prs.open.number, body);
        return { number: prs.open.number, url: prs.open.url, branch: sync, updated: true };
      }
      const pr = await forge.openPr({ head: sync, base: branch, title: syncTitle(branch), body });
      return { number: pr.number, url: pr.url, branch: sync };
    };
    const synced = (pr: { number: number; updated?: boolean }, what: string) =>
      `${what}; PR #${pr.number}${pr.updated ? ' updated' : ''}`;

    // The cheap paths: no agent for a fast-forward, or a clean merge whose tests (if any) pass.
    let cleanMergeFailed: TestRun | undefined;
    if (await inVerify(fork, upstream)) {
      say('fast-forward: no agent needed');
      const pr = await propose(upstream, 'a fast-forward', ['- no agent ran']);
      return done({
        outcome: 'synced',
        exitCode: 0,
        merged: upstream,
        pr,
        detail: synced(pr, 'fast-forward'),
      });
    }
    const tree = await verifyGit(['merge-tree', '--write-tree', fork, upstream]).then(
      (out) => out.split('\n')[0]!.trim(),
      () => undefined,
    );
    if (tree) {
      const merged = await commitTree(
        tree,
        [fork, upstream],
        `Merge upstream ${branch} into ${branch}`,
      );
      const tested = await tests(merged, 'the clean merge');
      if (!tested || tested.ok) {
        say('clean merge: no agent needed');
        const pr = await propose(merged, 'a clean merge', [
          '- no agent ran: the merge had no conflict',
          ...testProof(tested),
        ]);
        return done({
          outcome: 'synced',
          exitCode: 0,
          merged,
          pr,
          detail: synced(pr, 'clean merge'),
          ...testsField(tested),
        });
      }
      cleanMergeFailed = tested;
      say('the clean merge fails its tests: an agent will fix it');
    }

    // The agent's path.
    const prompt = agentPrompt({
      branch,
      forkMd: forkMdText,
      test: rules.test,
      failedTests: cleanMergeFailed?.tail,
    });
    const timeoutMs = o.timeoutMs ?? 8 * 60_000;
    const a = await mergeByAgent({
      backend: o.backend,
      env: o.env,
      image,
      agent: o.agent,
      agentSecrets: o.agentSecrets,
      runDir,
      verify: verify(),
      branch,
      fork,
      upstream,
      prompt,
      timeoutMs,
      diskBytes: o.diskBytes ?? 10 * 1024 ** 3,
      maxImportBytes: o.maxImportBytes ?? 1024 ** 3,
      name,
      labels,
      say,
    });
    const ran = { agentRan: a.agentRan, agent: a.agent };
    if (a.kind === 'over-disk')
      return done({
        ...ran,
        outcome: 'error',
        exitCode: OUTCOMES.error,
        detail: `the agent was stopped for writing more than its disk limit (--disk) to its workspace and home; its work is in ${a.workspace}`,
      });
    type Behind = Parameters<typeof done>[0];
    /** A run that leaves the fork behind proposes the furthest prefix of upstream that merges, if any. */
    const behind = async (r: Behind): Promise<ForkliftResult> => {
      say('looking for the furthest upstream commit the host can merge (partial sync)');
      const testRuns = new Map<string, TestRun | undefined>();
      const p = await findMergeablePrefix({
        git: verifyGit,
        fork,
        upstream,
        mergeClean: async (c) => {
          const t = await verifyGit(['merge-tree', '--write-tree', fork, c]).then(
            (out) => out.split('\n')[0]!.trim(),
            () => undefined,
          );
          return (
            t &&
            commitTree(t, [fork, c], `Merge upstream ${branch} up to ${short(c)} into ${branch}`)
          );
        },
        tests: rules.test
          ? async (c) => {
              testRuns.set(c, await tests(c, `a merge of upstream up to part of its range`));
              return testRuns.get(c)?.ok ?? true;
            }
          : undefined,
        say,
      }).catch((err) => {
        warn(`the partial sync could not be tried: ${errorMessage(err)}`);
        return undefined;
      });
      if (!p) return done(r);
      const pr = await propose(
        p.merged,
        `a partial sync: upstream up to \`${short(p.commit)}\`, ${p.taken} of its ${p.total} commits, by the host with no agent`,
        [
          `- partial: the whole of upstream \`${branch}\` (\`${upstream}\`) could not be merged (${r.outcome}); this merges its first ${p.taken} of ${p.total} first-parent commits without a conflict${rules.test ? ", and the fork's tests passed on it" : ''}`,
          ...fenced('What blocks the rest:', plain(scrub(r.detail, hostPaths))),
          ...fenced(
            'The first upstream commit not taken (its subject, as upstream wrote it):',
            `${p.blocker.commit} ${plain(p.blocker.subject)}`,
          ),
          ...(r.stuck
            ? fenced("The agent's STUCK.md on the whole range (its words, unverified):", r.stuck)
            : []),
        ],
        p.commit,
      );
      return done({
        ...r,
        ...testsField(testRuns.get(p.merged)),
        outcome: 'partial',
        exitCode: OUTCOMES.partial,
        merged: p.merged,
        pr,
        partial: { upTo: p.commit, taken: p.taken, total: p.total, blocker: p.blocker.commit },
        detail: `${r.detail}; PR #${pr.number}${pr.updated ? ' updated' : ''} proposes upstream up to ${short(p.commit)} (${p.taken} of ${p.total} commits)`,
      });
    };
    if (a.kind === 'timed-out')
      return behind({
        ...ran,
        outcome: 'timed-out',
        exitCode: OUTCOMES['timed-out'],
        detail: `the agent was stopped after ${Math.round(timeoutMs / 1000)} s; its work is in ${a.workspace}`,
      });
    if (a.kind === 'stuck')
      return behind({
        ...ran,
        outcome: 'stuck',
        exitCode: OUTCOMES.stuck,
        stuck: a.stuck,
        detail: `the agent is stuck: see ${join(a.workspace, 'STUCK.md')}`,
      });
    const failed = (why: string, extra: Partial<ForkliftResult> = {}) =>
      behind({
        ...ran,
        ...extra,
        outcome: 'verification-failed',
        exitCode: OUTCOMES['verification-failed'],
        detail: why,
      });
    if (a.kind === 'unreadable') return failed(a.why);
    const { merged, said } = a;
    const checked = await checkAgentResult({
      git: verifyGit,
      verify: verify(),
      branch,
      fork,
      upstream,
      merged,
      protect: rules.protect,
      said,
    });
    if ('failure' in checked) return failed(checked.failure, checked.found ?? {});
    const { check, work } = checked;
    const beyond = checked.found;
    const tested = await tests(merged, "the agent's merge");
    if (tested && !tested.ok)
      return failed(
        `the fork's tests ${tested.timedOut ? 'timed out' : `fail (exit ${tested.exitCode})`} on the agent's merge (${short(merged)}): its output ends\n${tested.tail.split('\n').slice(-10).join('\n')}`,
        { ...beyond, ...testsField(tested) },
      );
    // Changes beyond the conflicts are taken only when the tests need them.
    if (tested && check.beyond.length) {
      const without = await withoutBeyond({
        gitDir: verify(),
        merged,
        autoTree: check.autoTree,
        paths: check.beyond,
        index: join(runDir, 'minimal.index'),
      });
      const needed = await tests(without, 'the result without its changes beyond the conflicts');
      if (needed?.ok)
        return failed(
          `the agent changed ${check.beyond.slice(0, 5).join(', ')}${check.beyond.length > 5 ? ', …' : ''} beyond the merge's conflicts, and the fork's tests pass without those changes: forklift proposes no change the merge does not need`,
          { ...beyond, ...testsField(tested) },
        );
    }
    const pr = await propose(merged, 'merged by an agent, verified by the host', [
      ...testProof(tested),
      ...(tested && check.beyond.length
        ? ["- the changes beyond the conflicts are needed: the fork's tests fail without them"]
        : []),
      ...(tested
        ? [
            "- the test files are the result's: what `protect:` in FORK.md names is the fork's or upstream's, the rest may be the agent's",
          ]
        : []),
      ...forkWorkProof(work),
      ...pathLists(check),
      ...a.report,
    ]);
    return done({
      ...ran,
      ...beyond,
      ...testsField(tested),
      outcome: 'synced',
      exitCode: 0,
      merged,
      pr,
      detail: synced(pr, 'merged by the agent'),
    });
  } catch (err) {
    // Whatever failed after the run began is recorded, with a branch already pushed.
    return done({
      outcome: 'error',
      exitCode: OUTCOMES.error,
      detail: `${errorMessage(err)}${pushed ? ` (the branch ${pushed} was pushed, but the pull request was not opened or updated)` : ''}`,
    });
  }
}

/** The operator's own git (their credentials for fetch), without prompts. */
function operatorEnv(env: Record<string, string | undefined>): NodeJS.ProcessEnv {
  // The forge token is for the push alone: not for the operator's helpers, ssh or proxies.
  const { FORKLIFT_TOKEN: _t, FORGE_TOKEN: _f, ...rest } = env;
  return { ...(rest as NodeJS.ProcessEnv), GIT_TERMINAL_PROMPT: '0' };
}
