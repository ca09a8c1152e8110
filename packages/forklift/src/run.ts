import { mkdirSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { BbError, errorMessage, registerSecret } from '@bb/errors';
import { type Forge, forgeKinds } from '@bb/forge';
import type { Backend } from '@bb/headless';
import { LABEL } from '@bb/names';
import {
  diskUsage,
  importHead,
  makeReaderRepo,
  readBranchAsData,
  readFileNoFollow,
  runGit,
  setRef,
  wallGitEnv,
} from '@bb/wall';
import type { AgentChoice } from './agent';
import { runAgentContainer } from './container';
import { fenced, plain, push, readReport } from './propose';
import { parseRemote, type RemoteRepo } from './remotes';
import { checkTree, parseForkMd, runTests, type TestRun, type TreeCheck } from './verify';

/** How a run ended, and its exit status (documented in --help and docs/forklift.md). */
export const OUTCOMES = {
  synced: 0,
  error: 1,
  'nothing-to-do': 3,
  stuck: 4,
  'timed-out': 5,
  'verification-failed': 6,
} as const;
export type Outcome = keyof typeof OUTCOMES;

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
  pr?: { number: number; url: string; branch: string };
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

export const DEFAULT_INSTRUCTIONS = (
  branch: string,
) => `You are keeping a fork in sync with its upstream project.

The repository in /workspace has no remotes. Its branch \`${branch}\` is the fork; its branch \`upstream/${branch}\` is the upstream project.

1. Merge \`upstream/${branch}\` into \`${branch}\` (on \`${branch}\`, \`git merge upstream/${branch}\`). Keep every commit of the fork: never reset, rebase away or drop them.
2. Resolve any conflict so that both the fork's changes and upstream's changes still do what they were meant to.
3. Find the project's tests (a Makefile, package.json, pyproject, Cargo.toml, ...) and run what you can; fix what the merge broke.
4. Make meaningful commits on \`${branch}\`, and leave \`${branch}\` checked out.
5. If you cannot finish, write STUCK.md at the repository root: the problem, what you tried, and where you stopped. Then stop.
6. Write what you did and which tests you ran, with their results, to /harness-state/report.md.

You have no credentials and no remotes: the host verifies your result (every commit of both sides kept, the fork's tests green, CI files untouched) and opens the pull request.`;

/** `$XDG_STATE_HOME/forklift/runs` (default `~/.local/state/forklift/runs`). */
export function runsDir(env: Record<string, string | undefined>): string {
  const state = env['XDG_STATE_HOME'] || join(env['HOME'] || homedir(), '.local', 'state');
  return join(state, 'forklift', 'runs');
}

const stamp = (d: Date) => d.toISOString().replace(/[-:]/g, '').replace('T', '_').slice(0, 15);
const short = (sha: string) => sha.slice(0, 12);

/**
 * Sync the fork in `checkout` with its upstream: fetch both; nothing to do, a
 * fast-forward or a clean merge (green when the fork declares tests) is turned
 * into a PR by the host alone; otherwise an agent merges in a container with no
 * remotes and no credentials, for at most `timeoutMs`, and the host decides:
 * STUCK.md, or its `main` verified (every upstream and fork commit reachable,
 * CI and protected files no one's but the two sides', the fork's tests green,
 * all read as data in a repository of the host's) and only then pushed and
 * proposed as a PR.
 */
export async function runForklift(o: ForkliftOptions): Promise<ForkliftResult> {
  const started = (o.now ?? (() => new Date()))();
  const t0 = Date.now();
  const branch = o.branch ?? 'main';
  const say = o.onProgress ?? (() => {});
  const image = o.image ?? 'forklift/kitchen-sink:latest';
  registerSecret(o.token);
  const host = (args: string[], timeoutMs = 300_000) =>
    runGit(['-C', o.checkout, ...args], { env: operatorEnv(o.env), timeoutMs });
  const remote = async (name: string) => {
    const url = await host(['remote', 'get-url', name]).catch(() => {
      throw new BbError(
        'INVALID_INPUT',
        `${o.checkout} has no ${name} remote: run forklift in a fork's checkout (git remote add ${name} URL)`,
      );
    });
    return parseRemote(name, url);
  };
  // The repository itself, from a subdirectory or a linked worktree as well.
  const top = (await host(['rev-parse', '--show-toplevel']).catch(() => o.checkout)).trim();
  const gitDir = (
    await host(['rev-parse', '--path-format=absolute', '--git-common-dir']).catch(() => {
      throw new BbError(
        'INVALID_INPUT',
        `${o.checkout} is not in a git repository: run forklift in a fork's checkout`,
      );
    })
  ).trim();
  // git in the verification repository (ours): a fixed configuration, the minimal environment.
  const verifyGit = (args: string[], config: Array<[string, string]> = []) =>
    runGit(['--git-dir', join(runDir, 'verify.git'), ...args], {
      env: wallGitEnv({ config }),
      timeoutMs: 600_000,
    });
  const origin = await remote('origin');
  await remote('upstream');
  const project = `${origin.owner}-${origin.repo}`.replace(/[^A-Za-z0-9._-]/g, '_');
  say('fetching origin and upstream');
  await host(['fetch', '--quiet', '--no-tags', 'origin']);
  await host(['fetch', '--quiet', '--no-tags', 'upstream']);
  const sha = async (ref: string) =>
    (await host(['rev-parse', '--verify', `${ref}^{commit}`])).trim();
  const fork = await sha(`refs/remotes/origin/${branch}`);
  const upstream = await sha(`refs/remotes/upstream/${branch}`);
  const ancestor = (a: string, b: string) =>
    host(['merge-base', '--is-ancestor', a, b]).then(
      () => true,
      () => false,
    );
  // Every run has its directory (its result is kept there for `forklift runs`).
  // Two runs in one second (cron and a person) each get their own directory and branch.
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
  const base = {
    project,
    upstream,
    fork,
    startedAt: started.toISOString(),
    agentRan: false,
    runDir,
  };
  const done = (
    r: Omit<ForkliftResult, 'durationMs' | keyof typeof base> & Partial<typeof base>,
  ): ForkliftResult => ({ ...base, ...r, durationMs: Date.now() - t0 });
  let pushed: string | undefined;
  try {
    if (await ancestor(upstream, fork))
      return done({
        outcome: 'nothing-to-do',
        exitCode: OUTCOMES['nothing-to-do'],
        detail: `${branch} already holds every upstream commit (${short(upstream)})`,
      });

    const forkMd = await host(['show', `${fork}:FORK.md`]).catch(() => '');
    // The fork's rules as its maintainer wrote them on origin: the agent's copy of FORK.md counts for nothing.
    const rules = parseForkMd(forkMd);
    const forge = (o.forgeFor ?? forkForge(o))(origin);
    // The token's git never runs in a repository with someone's config or hooks: pushes go
    // from a bare repository of ours that reads the checkout's objects.
    const verify = join(runDir, 'verify.git');
    // It holds the two published branches' objects and nothing else of the checkout:
    // borrowing the checkout's store would let an agent's merge name a commit of the
    // operator's that was never published, and have it pass and be pushed (I10).
    makeReaderRepo(verify, []);
    say('copying the published branches into the verification repository');
    await verifyGit(
      [
        'fetch',
        '--quiet',
        '--no-tags',
        '--no-write-fetch-head',
        gitDir,
        `+refs/remotes/origin/${branch}:refs/bb/fork`,
        `+refs/remotes/upstream/${branch}:refs/bb/upstream`,
      ],
      [['protocol.file.allow', 'always']],
    );
    for (const [ref, want] of [
      ['refs/bb/fork', fork],
      ['refs/bb/upstream', upstream],
    ] as const) {
      const got = (await verifyGit(['rev-parse', '--verify', `${ref}^{commit}`])).trim();
      if (got !== want)
        throw new BbError(
          'CONFLICT',
          `${ref.slice(8)} moved while forklift copied it (${short(want)} → ${short(got)}): run forklift again`,
        );
    }
    // Both sides are known to it (imported, as importHead counts): an import of the agent's
    // result adds only the agent's objects.
    setRef(verify, `refs/bb/imported/${fork}`, fork);
    setRef(verify, `refs/bb/imported/${upstream}`, upstream);
    // A checkout for the tests takes nothing from the tree's attributes: the bytes tested are the bytes pushed.
    mkdirSync(join(verify, 'info'), { recursive: true });
    writeFileSync(
      join(verify, 'info', 'attributes'),
      '* -text -eol -ident -filter -working-tree-encoding\n',
    );
    const tests = async (commit: string, what: string): Promise<TestRun | undefined> => {
      if (!rules.test) return undefined;
      say(`running the fork's tests on ${what}: ${rules.test}`);
      const r = await runTests({
        backend: o.backend,
        image,
        gitDir: verify,
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
    const testProof = (r: TestRun | undefined) =>
      r
        ? [
            `- the fork's tests (\`${rules.test}\`), run by the host on the result in a fresh container with no network: passed in ${Math.round(r.durationMs / 1000)} s`,
          ]
        : ['- the fork declares no test command (FORK.md `test:`): no tests were run by the host'];
    const testsField = (r: TestRun | undefined) =>
      r
        ? {
            tests: {
              ok: r.ok,
              exitCode: r.exitCode,
              timedOut: r.timedOut,
              durationMs: r.durationMs,
            },
          }
        : {};
    const propose = async (merged: string, how: string, proof: string[]) => {
      const branchName = `forklift/sync-${runId.replace('_', '-')}`;
      await push(forge, verify, merged, branchName);
      pushed = branchName;
      const pr = await forge.openPr({
        head: branchName,
        base: branch,
        title: `Sync with upstream ${branch} (${short(upstream)})`,
        body: [
          `forklift merged upstream \`${branch}\` into the fork's \`${branch}\` (${how}).`,
          '',
          `- upstream \`${branch}\`: \`${upstream}\``,
          `- fork \`${branch}\`: \`${fork}\``,
          `- result: \`${merged}\``,
          `- checked on the host: upstream \`${branch}\` is an ancestor of the result; the fork's \`${branch}\` is an ancestor of the result`,
          ...proof,
          `- time used: ${Math.round((Date.now() - t0) / 1000)} s`,
        ].join('\n'),
      });
      return { number: pr.number, url: pr.url, branch: branchName };
    };

    // The cheap paths: no agent for a fast-forward, or a clean merge whose tests (if any) pass.
    let cleanMergeFailed: TestRun | undefined;
    if (await ancestor(fork, upstream)) {
      say('fast-forward: no agent needed');
      const pr = await propose(upstream, 'a fast-forward', ['- no agent ran']);
      return done({
        outcome: 'synced',
        exitCode: 0,
        merged: upstream,
        pr,
        detail: `fast-forward; PR #${pr.number}`,
      });
    }
    const tree = await verifyGit(['merge-tree', '--write-tree', fork, upstream]).then(
      (out) => out.split('\n')[0]!.trim(),
      () => undefined,
    );
    if (tree) {
      const merged = (
        await runGit(
          [
            '--git-dir',
            verify,
            'commit-tree',
            tree,
            '-p',
            fork,
            '-p',
            upstream,
            '-m',
            `Merge upstream ${branch} into ${branch}`,
          ],
          { env: { ...wallGitEnv(), ...FORKLIFT_IDENTITY }, timeoutMs: 300_000 },
        )
      ).trim();
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
          detail: `clean merge; PR #${pr.number}`,
          ...testsField(tested),
        });
      }
      cleanMergeFailed = tested;
      say('the clean merge fails its tests: an agent will fix it');
    }

    // The agent's path.
    const workspace = join(runDir, 'workspace');
    const harness = join(runDir, 'harness-state');
    mkdirSync(harness, { recursive: true, mode: 0o755 });
    say(`preparing ${runDir}`);
    const hostGit = (args: string[]) => runGit(args, { env: wallGitEnv(), timeoutMs: 600_000 });
    // Only the two branches, with objects of their own: nothing else of the checkout (other
    // branches, stashes, unreachable objects) and no alternates the container could not see.
    await hostGit(['init', '--quiet', `--initial-branch=${branch}`, workspace]);
    await runGit(
      [
        '-C',
        workspace,
        'fetch',
        '--quiet',
        '--no-tags',
        // The new repository's unborn branch is the one being filled.
        '--update-head-ok',
        top,
        `refs/remotes/origin/${branch}:refs/heads/${branch}`,
        `refs/remotes/upstream/${branch}:refs/heads/upstream/${branch}`,
      ],
      { env: wallGitEnv({ config: [['protocol.file.allow', 'always']] }), timeoutMs: 600_000 },
    );
    await hostGit(['-C', workspace, 'checkout', '--quiet', '--force', branch]);
    const prompt = [
      DEFAULT_INSTRUCTIONS(branch),
      forkMd ? `\n\nThe fork's own constraints (FORK.md):\n\n${forkMd}` : '',
      rules.test ? `\n\nThe tests: ${rules.test}` : '',
      cleanMergeFailed
        ? `\n\nThe merge has no textual conflict, but the tests fail on it (a semantic conflict). Their output ends:\n\n${cleanMergeFailed.tail}`
        : '',
      '\n',
    ].join('');
    const timeoutMs = o.timeoutMs ?? 8 * 60_000;
    say(`running the ${o.agent.name} agent (at most ${Math.round(timeoutMs / 1000)} s)`);
    const agentDone = await runAgentContainer({
      backend: o.backend,
      env: o.env,
      image,
      choice: o.agent,
      prompt,
      ...(o.agentSecrets ? { secrets: o.agentSecrets } : {}),
      runDir,
      workspace,
      harness,
      name,
      labels,
      timeoutMs,
      // What the copy of the repository already takes, plus the limit.
      diskBytes: diskUsage(workspace, { strict: true }) + (o.diskBytes ?? 10 * 1024 ** 3),
      onProgress: say,
    });
    const ran = {
      agentRan: true,
      agent: {
        name: o.agent.name,
        ok: agentDone.ok,
        ...(agentDone.error ? { error: plain(agentDone.error).slice(0, 500) } : {}),
      },
    };
    if (agentDone.overDisk)
      return done({
        ...ran,
        outcome: 'error',
        exitCode: OUTCOMES.error,
        detail: `the agent was stopped for writing more than its disk limit (--disk) to its workspace and home; its work is in ${workspace}`,
      });
    if (agentDone.timedOut)
      return done({
        ...ran,
        outcome: 'timed-out',
        exitCode: OUTCOMES['timed-out'],
        detail: `the agent was stopped after ${Math.round(timeoutMs / 1000)} s; its work is in ${workspace}`,
      });

    // STUCK.md first, read as data: a link or a device is not followed.
    let stuck: string | undefined;
    try {
      stuck = readFileNoFollow(workspace, 'STUCK.md', { maxBytes: 256 * 1024 })?.toString('utf8');
    } catch (err) {
      stuck = `(STUCK.md is there but was not read: ${errorMessage(err)})`;
    }
    if (stuck !== undefined) {
      const preview = plain(stuck.split('\n').slice(0, 12).join('\n').slice(0, 2000));
      return done({
        ...ran,
        outcome: 'stuck',
        exitCode: OUTCOMES.stuck,
        stuck: preview,
        detail: `the agent is stuck: see ${join(workspace, 'STUCK.md')}`,
      });
    }

    // The agent's branch, read as data and brought into the repository of ours, where
    // everything is checked; nothing of the workspace's config, hooks or attributes applies.
    const failed = (why: string, extra: Partial<ForkliftResult> = {}) =>
      done({
        ...ran,
        ...extra,
        outcome: 'verification-failed',
        exitCode: OUTCOMES['verification-failed'],
        detail: why,
      });
    const said = agentDone.ok
      ? ''
      : ` (the agent said: ${ran.agent.error ?? `exit ${agentDone.exitCode}`})`;
    let merged: string | undefined;
    try {
      merged = readBranchAsData(workspace, branch);
      if (!merged) return failed(`the agent left no ${branch} branch${said}`);
      await importHead({
        workspace,
        into: verify,
        commit: merged,
        timeoutMs: 600_000,
        // Only the agent's own objects are added (both sides are known): a merge's worth.
        maxRepoBytes: diskUsage(join(verify, 'objects')) + (o.maxImportBytes ?? 1024 ** 3),
      });
    } catch (err) {
      return failed(`the agent's ${branch} could not be read: ${errorMessage(err)}`);
    }
    const inVerify = (a: string, b: string) =>
      hostGit(['--git-dir', verify, 'merge-base', '--is-ancestor', a, b]).then(
        () => true,
        () => false,
      );
    if (!(await inVerify(upstream, merged)))
      return failed(
        `upstream ${branch} (${short(upstream)}) is not in the agent's ${branch} (${short(merged)}): it did not merge${said}`,
      );
    if (!(await inVerify(fork, merged)))
      return failed(
        `the fork's ${branch} (${short(fork)}) is not in the agent's ${branch} (${short(merged)}): fork commits would be lost`,
      );
    let check: TreeCheck;
    try {
      check = await checkTree(verify, { fork, upstream, merged }, rules.protect);
    } catch (err) {
      return failed(`the agent's result could not be checked: ${errorMessage(err)}`);
    }
    const beyond = { beyondMerge: check.beyond };
    if (check.violations.length)
      return failed(
        `the agent wrote CI or protected files (${check.violations.join(', ')}): in a result forklift pushes, those are the fork's, upstream's or the automatic merge's`,
        beyond,
      );
    const tested = await tests(merged, "the agent's merge");
    if (tested && !tested.ok)
      return failed(
        `the fork's tests ${tested.timedOut ? 'timed out' : `fail (exit ${tested.exitCode})`} on the agent's merge (${short(merged)}): see ${join(runDir, 'tested')}`,
        { ...beyond, ...testsField(tested) },
      );
    const pr = await propose(merged, 'merged by an agent, verified by the host', [
      ...testProof(tested),
      ...(tested
        ? [
            "- the test files are the result's: what `protect:` in FORK.md names is the fork's or upstream's, the rest may be the agent's",
          ]
        : []),
      ...pathLists(check),
      ...readReport(harness),
    ]);
    return done({
      ...ran,
      ...beyond,
      ...testsField(tested),
      outcome: 'synced',
      exitCode: 0,
      merged,
      pr,
      detail: `merged by the agent; PR #${pr.number}`,
    });
  } catch (err) {
    // Whatever failed after the run began is recorded, with a branch already pushed.
    return done({
      outcome: 'error',
      exitCode: OUTCOMES.error,
      detail: `${errorMessage(err)}${pushed ? ` (the branch ${pushed} was pushed, but no pull request was opened)` : ''}`,
    });
  }
}

/** The conflicts resolved and the paths changed beyond them, as text in a fence (names are anyone's bytes). */
function pathLists(check: TreeCheck): string[] {
  if (!check.conflicted.length && !check.beyond.length)
    return ['- the merge had no textual conflict, and nothing changed beyond it'];
  const list = (xs: string[]) =>
    xs.slice(0, 100).join('\n') + (xs.length > 100 ? `\n… and ${xs.length - 100} more` : '');
  return fenced(
    'What the agent changed (paths as git quotes them):',
    [
      check.conflicted.length
        ? `conflicts it resolved:\n${list(check.conflicted)}`
        : 'no textual conflict',
      check.beyond.length
        ? `changed beyond the conflicts (review these):\n${list(check.beyond)}`
        : 'nothing changed beyond the conflicts',
    ].join('\n\n'),
  );
}

/** The identity of commits forklift itself makes (a clean merge). */
const FORKLIFT_IDENTITY = {
  GIT_AUTHOR_NAME: 'forklift',
  GIT_AUTHOR_EMAIL: 'forklift@localhost',
  GIT_COMMITTER_NAME: 'forklift',
  GIT_COMMITTER_EMAIL: 'forklift@localhost',
};

/** The operator's own git (their credentials for fetch), without prompts. */
function operatorEnv(env: Record<string, string | undefined>): NodeJS.ProcessEnv {
  // The forge token is for the push alone: not for the operator's helpers, ssh or proxies.
  const { FORKLIFT_TOKEN: _t, FORGE_TOKEN: _f, ...rest } = env;
  return { ...(rest as NodeJS.ProcessEnv), GIT_TERMINAL_PROMPT: '0' };
}

/**
 * The fork's forge from the kind registry: `FORKLIFT_FORGE_KIND` (else `FORGE_KIND`,
 * else the default kind). Its site is where `FORKLIFT_API` says (Gitea's API URL),
 * else where the origin remote's web base is (`siteAt`), else the kind's own variables.
 */
export function forkForge(o: Pick<ForkliftOptions, 'env' | 'token'>) {
  const name = o.env['FORKLIFT_FORGE_KIND'] || o.env['FORGE_KIND'] || forgeKinds.defaultKind;
  const kind = forgeKinds.get(name);
  return (r: RemoteRepo): Forge => {
    const api = o.env['FORKLIFT_API'];
    const site =
      api && kind.name === 'gitea'
        ? kind.fromEnv({ FORGE_GITEA_API: api })
        : !api && kind.siteAt
          ? kind.siteAt(r.webBase)
          : kind.fromEnv(o.env);
    return site.forgeFor({ owner: r.owner, repo: r.repo, token: o.token });
  };
}
