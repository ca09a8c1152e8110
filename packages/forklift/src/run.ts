import { chownSync, existsSync, lchownSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { BbError, errorMessage, isBbError, registerSecret } from '@bb/errors';
import { type Forge, GiteaForge } from '@bb/forge';
import { type Backend, HOME_LABEL, homeLabel } from '@bb/headless';
import {
  importHead,
  makeReaderRepo,
  readBranchAsData,
  readFileNoFollow,
  runGit,
  wallGitEnv,
} from '@bb/wall';
import { parseRemote, type RemoteRepo } from './remotes';

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

/** What runs in the container: files placed in `harness-state/`, the command, its environment. */
export interface ForkliftAgent {
  files: Record<string, string | Uint8Array>;
  cmd: string[];
  env: Record<string, string>;
}

export interface ForkliftOptions {
  /** The fork's checkout, with `origin` and `upstream` remotes. */
  checkout: string;
  env: Record<string, string | undefined>;
  backend: Backend;
  /** The agent's image. @default forklift/kitchen-sink:latest */
  image?: string;
  /** The host kills the agent after this long, whatever it does. @default 8 min */
  timeoutMs?: number;
  /** The agent for a prompt (its instructions, with FORK.md). */
  agent: (prompt: string) => ForkliftAgent;
  /** The forge token for the push and the PR (never given to the agent). */
  token: string;
  /** The fork's forge. @default GiteaForge at FORKLIFT_API or <origin web base>/api/v1 */
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
  runDir: string;
  agentRan: boolean;
  durationMs: number;
  startedAt: string;
}

const AGENT = { uid: 1000, gid: 1000 };

export const DEFAULT_INSTRUCTIONS = (
  branch: string,
) => `You are keeping a fork in sync with its upstream project.

The repository in /workspace has no remotes. Its branch \`${branch}\` is the fork; its branch \`upstream/${branch}\` is the upstream project.

1. Merge \`upstream/${branch}\` into \`${branch}\` (on \`${branch}\`, \`git merge upstream/${branch}\`). Keep every commit of the fork: never reset, rebase away or drop them.
2. Resolve any conflict so that both the fork's changes and upstream's changes still do what they were meant to.
3. Find the project's tests (a Makefile, package.json, pyproject, Cargo.toml, ...) and run what you can; fix what the merge broke.
4. Make meaningful commits on \`${branch}\`, and leave \`${branch}\` checked out.
5. If you cannot finish, write STUCK.md at the repository root: the problem, what you tried, and where you stopped. Then stop.

You have no credentials and no remotes: the host verifies your result and opens the pull request.`;

/** `$XDG_STATE_HOME/forklift/runs` (default `~/.local/state/forklift/runs`). */
export function runsDir(env: Record<string, string | undefined>): string {
  const state = env['XDG_STATE_HOME'] || join(env['HOME'] || homedir(), '.local', 'state');
  return join(state, 'forklift', 'runs');
}

const stamp = (d: Date) => d.toISOString().replace(/[-:]/g, '').replace('T', '_').slice(0, 15);

/**
 * Sync the fork in `checkout` with its upstream: fetch both; nothing to do, a
 * fast-forward or a clean merge is turned into a PR by the host alone; otherwise an
 * agent merges in a container with no remotes and no credentials, for at most
 * `timeoutMs`, and the host decides: STUCK.md, or its `main` verified (every
 * upstream and fork commit reachable, read as data in a repository of the host's)
 * and only then pushed and proposed as a PR.
 */
export async function runForklift(o: ForkliftOptions): Promise<ForkliftResult> {
  const started = (o.now ?? (() => new Date()))();
  const t0 = Date.now();
  const branch = o.branch ?? 'main';
  const say = o.onProgress ?? (() => {});
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
  const origin = await remote('origin');
  await remote('upstream');
  const project = `${origin.owner}-${origin.repo}`.replace(/[^A-Za-z0-9._-]/g, '_');
  say(`fetching origin and upstream`);
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
  let runId = stamp(started);
  for (let i = 2; existsSync(join(runsDir(o.env), `${project}_${runId}`)); i++)
    runId = `${stamp(started)}-${i}`;
  const runDir = join(runsDir(o.env), `${project}_${runId}`);
  // The host's: the agent's files in it are no one else's business.
  mkdirSync(runDir, { recursive: true, mode: 0o700 });
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
  ): ForkliftResult => ({
    ...base,
    ...r,
    durationMs: Date.now() - t0,
  });
  if (await ancestor(upstream, fork))
    return done({
      outcome: 'nothing-to-do',
      exitCode: OUTCOMES['nothing-to-do'],
      detail: `${branch} already holds every upstream commit (${upstream.slice(0, 12)})`,
    });

  const forkMd = await host(['show', `${fork}:FORK.md`]).catch(() => '');
  const testCommand = /^test:\s*(.+)$/im.exec(forkMd)?.[1]?.trim();
  const forge = (o.forgeFor ?? defaultForge(o))(origin);
  // The token's git never runs in a repository with someone's config or hooks: pushes go
  // from a bare repository of ours that reads the checkout's objects.
  const pushRepo = () => {
    const dir = join(runDir, 'push.git');
    makeReaderRepo(dir, [join(o.checkout, '.git', 'objects')]);
    return dir;
  };
  const propose = async (merged: string, how: string, repoDir: string, proof: string[]) => {
    const name = `forklift/sync-${runId.replace('_', '-')}`;
    await push(forge, repoDir, merged, name);
    const pr = await forge.openPr({
      head: name,
      base: branch,
      title: `Sync with upstream ${branch} (${upstream.slice(0, 12)})`,
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
    return { number: pr.number, url: pr.url, branch: name };
  };

  // The cheap path: no agent for a fast-forward or a clean merge with nothing to test.
  if (await ancestor(fork, upstream)) {
    say('fast-forward: no agent needed');
    const pr = await propose(upstream, 'a fast-forward', pushRepo(), ['- no agent ran']);
    return done({
      outcome: 'synced',
      exitCode: 0,
      merged: upstream,
      pr,
      detail: `fast-forward; PR #${pr.number}`,
    });
  }
  if (!testCommand) {
    const tree = await host(['merge-tree', '--write-tree', fork, upstream]).then(
      (out) => out.split('\n')[0]!.trim(),
      () => undefined,
    );
    if (tree) {
      say('clean merge: no agent needed');
      const merged = (
        await runGit(
          [
            '-C',
            o.checkout,
            'commit-tree',
            tree,
            '-p',
            fork,
            '-p',
            upstream,
            '-m',
            `Merge upstream ${branch} into ${branch}`,
          ],
          {
            env: { ...operatorEnv(o.env), ...FORKLIFT_IDENTITY },
          },
        )
      ).trim();
      const pr = await propose(merged, 'a clean merge', pushRepo(), [
        '- no agent ran: the merge had no conflict',
      ]);
      return done({
        outcome: 'synced',
        exitCode: 0,
        merged,
        pr,
        detail: `clean merge; PR #${pr.number}`,
      });
    }
  }

  // The agent's path.
  const workspace = join(runDir, 'workspace');
  const harness = join(runDir, 'harness-state');
  mkdirSync(harness, { recursive: true, mode: 0o755 });
  say(`preparing ${runDir}`);
  const hostGit = (args: string[]) => runGit(args, { env: wallGitEnv(), timeoutMs: 600_000 });
  // A copy with objects of its own (no alternates: the container sees only its two mounts).
  // Only the two branches, with objects of its own: nothing else of the checkout (other
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
      o.checkout,
      `refs/remotes/origin/${branch}:refs/heads/${branch}`,
      `refs/remotes/upstream/${branch}:refs/heads/upstream/${branch}`,
    ],
    { env: wallGitEnv({ config: [['protocol.file.allow', 'always']] }), timeoutMs: 600_000 },
  );
  await hostGit(['-C', workspace, 'checkout', '--quiet', '--force', branch]);
  const prompt = `${DEFAULT_INSTRUCTIONS(branch)}${forkMd ? `\n\nThe fork's own constraints (FORK.md):\n\n${forkMd}` : ''}${testCommand ? `\n\nThe tests: ${testCommand}` : ''}\n`;
  const agent = o.agent(prompt);
  for (const [rel, content] of Object.entries({ 'prompt.md': prompt, ...agent.files })) {
    mkdirSync(join(harness, rel, '..'), { recursive: true, mode: 0o755 });
    writeFileSync(join(harness, rel), content, { mode: 0o755 });
  }
  // Everything the agent may write is its own before it runs (nothing of its yet to follow).
  if (process.getuid?.() === 0) for (const d of [workspace, harness]) chownTree(d);

  const timeoutMs = o.timeoutMs ?? 8 * 60_000;
  say(`running the agent (at most ${Math.round(timeoutMs / 1000)} s)`);
  const id = await o.backend.create({
    name: `forklift-${project}-${runId}`
      .toLowerCase()
      .replace(/[^a-z0-9_.-]/g, '-')
      .slice(0, 120),
    image: o.image ?? 'forklift/kitchen-sink:latest',
    cmd: agent.cmd,
    env: { HOME: '/harness-state/home', ...agent.env },
    user: `${AGENT.uid}:${AGENT.gid}`,
    workdir: '/workspace',
    labels: {
      'bb.slug': `forklift-${project}`,
      'bb.role': 'forklift-agent',
      [HOME_LABEL]: homeLabel(o.env),
    },
    network: 'none',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=1g' },
    mounts: [
      { source: workspace, target: '/workspace' },
      { source: harness, target: '/harness-state' },
    ],
    resources: { memoryBytes: 4 * 1024 ** 3, pidsLimit: 1024 },
  });
  let timedOut = false;
  try {
    await o.backend.start(id);
    await o.backend.wait(id, { timeoutMs }).catch(async (err) => {
      if (!isBbError(err, 'TIMEOUT')) throw err;
      timedOut = true;
      await o.backend.stop(id, 1000).catch(() => {});
    });
    writeFileSync(
      join(runDir, 'agent.log'),
      await o.backend.logs(id).catch((e) => errorMessage(e)),
    );
  } finally {
    await o.backend.destroy(id).catch(() => {});
  }
  const ran = { agentRan: true };
  if (timedOut)
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

  // The agent's branch, read as data and brought into a repository of ours, where the
  // ancestry is checked; nothing of the workspace's config, hooks or attributes applies.
  const verify = join(runDir, 'verify.git');
  makeReaderRepo(verify, [join(o.checkout, '.git', 'objects')]);
  const failed = (why: string) =>
    done({
      ...ran,
      outcome: 'verification-failed',
      exitCode: OUTCOMES['verification-failed'],
      detail: why,
    });
  let merged: string | undefined;
  try {
    merged = readBranchAsData(workspace, branch);
    if (!merged) return failed(`the agent left no ${branch} branch`);
    await importHead({ workspace, into: verify, commit: merged, timeoutMs: 600_000 });
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
      `upstream ${branch} (${upstream.slice(0, 12)}) is not in the agent's ${branch} (${merged.slice(0, 12)}): it did not merge`,
    );
  if (!(await inVerify(fork, merged)))
    return failed(
      `the fork's ${branch} (${fork.slice(0, 12)}) is not in the agent's ${branch} (${merged.slice(0, 12)}): fork commits would be lost`,
    );
  const report = readReport(harness);
  const pr = await propose(merged, 'merged by an agent, verified by the host', verify, report);
  return done({
    ...ran,
    outcome: 'synced',
    exitCode: 0,
    merged,
    pr,
    detail: `merged by the agent; PR #${pr.number}`,
  });
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

function defaultForge(o: ForkliftOptions) {
  return (r: RemoteRepo): Forge =>
    new GiteaForge({
      baseUrl: o.env['FORKLIFT_API'] || `${r.webBase}/api/v1`,
      token: o.token,
      owner: r.owner,
      repo: r.repo,
    });
}

/** Push `sha` from a repository of ours to `branch` of the fork, the token in git's environment only. */
async function push(forge: Forge, repoDir: string, sha: string, branch: string): Promise<void> {
  const remote = forge.gitRemote();
  if (!remote)
    throw new BbError('INVALID_INPUT', `the ${forge.kind} forge gives forklift no way to push`);
  const scheme = new URL(remote.url).protocol.replace(':', '');
  const config: Array<[string, string]> = [
    // Only the forge's own transport, only for this push.
    [`protocol.${scheme}.allow`, 'always'],
    ...Object.entries(remote.headers).map(
      ([k, v]) => ['http.extraHeader', `${k}: ${v}`] as [string, string],
    ),
  ];
  await runGit(
    ['--git-dir', repoDir, 'push', '--quiet', remote.url, `${sha}:refs/heads/${branch}`],
    {
      env: wallGitEnv({ config }),
      timeoutMs: 600_000,
    },
  );
}

/** What the agent says it ran (harness-state/report.md), as plain text lines for the PR. */
function readReport(harness: string): string[] {
  try {
    const text = readFileNoFollow(harness, 'report.md', { maxBytes: 16 * 1024 })?.toString('utf8');
    if (!text) return ['- the agent left no report (harness-state/report.md)'];
    // Shown as text, never as Markdown: no link, image, mention or "Closes #n" of the agent's acts.
    const body = plain(text.split('\n').slice(0, 60).join('\n')).trimEnd();
    const fence = '`'.repeat(Math.max(3, ...[...body.matchAll(/`+/g)].map((m) => m[0].length + 1)));
    return ['', "The agent's report (unverified):", '', `${fence}text`, body, fence];
  } catch {
    return ["- the agent's report could not be read"];
  }
}

/** Give the run directory to the agent's user (nothing the agent made is in it yet). */
function chownTree(dir: string): void {
  lchownSync(dir, AGENT.uid, AGENT.gid);
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) chownTree(p);
    else lchownSync(p, AGENT.uid, AGENT.gid);
  }
  chownSync(dir, AGENT.uid, AGENT.gid);
}

/** Text the agent wrote, without the control characters a terminal or a renderer would act on. */
function plain(text: string): string {
  return text.replace(
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/g,
    '',
  );
}
