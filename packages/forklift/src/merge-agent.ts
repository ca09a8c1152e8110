/**
 * The agent's path of a run: a copy of the two branches with no remotes, the agent
 * in its container for at most the time cap, then its result read as data into the
 * host's verification repository. The checks of the result are the caller's.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import type { Backend } from '@bb/headless';
import {
  diskUsage,
  importHead,
  readBranchAsData,
  readFileNoFollow,
  runGit,
  setRef,
  wallGitEnv,
} from '@bb/wall';
import type { AgentChoice } from './agent';
import { runAgentContainer } from './container';
import { plain, readReport } from './propose';
import { quarantine } from './quarantine';

export interface AgentMergeInput {
  backend: Backend;
  env: Record<string, string | undefined>;
  image: string;
  agent: AgentChoice;
  agentSecrets?: Record<string, string> | undefined;
  runDir: string;
  /** forklift's verification repository: holds both sides, takes the agent's result. */
  verify: string;
  branch: string;
  /** The fork's side (the published branch, or forklift's record of a squash merge on it). */
  fork: string;
  upstream: string;
  prompt: string;
  timeoutMs: number;
  diskBytes: number;
  maxImportBytes: number;
  name: string;
  labels: Record<string, string>;
  say: (line: string) => void;
}

export interface AgentRan {
  agentRan: true;
  agent: { name: string; ok: boolean; error?: string };
}

export type AgentMerge =
  | (AgentRan & { kind: 'over-disk'; workspace: string })
  | (AgentRan & { kind: 'timed-out'; workspace: string })
  | (AgentRan & { kind: 'stuck'; stuck: string; workspace: string })
  | (AgentRan & { kind: 'unreadable'; why: string })
  | (AgentRan & { kind: 'merged'; merged: string; said: string; report: string[] });

/** Run the agent on a copy of `fork` and `upstream`; its result is imported into `verify`. */
export async function mergeByAgent(o: AgentMergeInput): Promise<AgentMerge> {
  const workspace = join(o.runDir, 'workspace');
  const harness = join(o.runDir, 'harness-state');
  mkdirSync(harness, { recursive: true, mode: 0o755 });
  o.say(`preparing ${o.runDir}`);
  const hostGit = (args: string[]) => runGit(args, { env: wallGitEnv(), timeoutMs: 600_000 });
  setRef(o.verify, 'refs/bb/agent-fork', o.fork);
  // Only the two sides, from forklift's own repository, with objects of their own: nothing
  // else of the checkout (other branches, stashes, unreachable objects) and no alternates.
  await hostGit(['init', '--quiet', `--initial-branch=${o.branch}`, workspace]);
  await runGit(
    [
      '-C',
      workspace,
      'fetch',
      '--quiet',
      '--no-tags',
      // The new repository's unborn branch is the one being filled.
      '--update-head-ok',
      o.verify,
      `refs/bb/agent-fork:refs/heads/${o.branch}`,
      `refs/bb/upstream:refs/heads/upstream/${o.branch}`,
    ],
    { env: wallGitEnv({ config: [['protocol.file.allow', 'always']] }), timeoutMs: 600_000 },
  );
  await hostGit(['-C', workspace, 'checkout', '--quiet', '--force', o.branch]);
  o.say(`running the ${o.agent.name} agent (at most ${Math.round(o.timeoutMs / 1000)} s)`);
  const done = await runAgentContainer({
    backend: o.backend,
    env: o.env,
    image: o.image,
    choice: o.agent,
    prompt: o.prompt,
    ...(o.agentSecrets ? { secrets: o.agentSecrets } : {}),
    runDir: o.runDir,
    workspace,
    harness,
    name: o.name,
    labels: o.labels,
    timeoutMs: o.timeoutMs,
    // What the copy of the repository already takes, plus the limit.
    diskBytes: diskUsage(workspace, { strict: true }) + o.diskBytes,
    onProgress: o.say,
  });
  const ran: AgentRan = {
    agentRan: true,
    agent: {
      name: o.agent.name,
      ok: done.ok,
      ...(done.error ? { error: plain(done.error).slice(0, 500) } : {}),
    },
  };
  // What the agent reports, read now: its files are put away next.
  const report = readReport(harness);
  const result = await readResult(o, ran, done, workspace);
  const kept = await quarantine(workspace);
  await quarantine(harness);
  if ('workspace' in result) return { ...result, workspace: kept };
  return result.kind === 'merged' ? { ...result, report } : result;
}

/** The agent's outcome, read from its workspace as data. */
async function readResult(
  o: AgentMergeInput,
  ran: AgentRan,
  done: { overDisk: boolean; timedOut: boolean; ok: boolean; exitCode: number },
  workspace: string,
): Promise<AgentMerge> {
  if (done.overDisk) return { ...ran, kind: 'over-disk', workspace };
  if (done.timedOut) return { ...ran, kind: 'timed-out', workspace };
  // STUCK.md first, read as data: a link or a device is not followed.
  let stuck: string | undefined;
  try {
    stuck = readFileNoFollow(workspace, 'STUCK.md', { maxBytes: 256 * 1024 })?.toString('utf8');
  } catch (err) {
    stuck = `(STUCK.md is there but was not read: ${errorMessage(err)})`;
  }
  if (stuck !== undefined)
    return {
      ...ran,
      kind: 'stuck',
      workspace,
      stuck: plain(stuck.split('\n').slice(0, 12).join('\n').slice(0, 2000)),
    };
  const said = done.ok ? '' : ` (the agent said: ${ran.agent.error ?? `exit ${done.exitCode}`})`;
  // The agent's branch, read as data and brought into the repository of ours, where
  // everything is checked; nothing of the workspace's config, hooks or attributes applies.
  try {
    const merged = readBranchAsData(workspace, o.branch);
    if (!merged)
      return { ...ran, kind: 'unreadable', why: `the agent left no ${o.branch} branch${said}` };
    await importHead({
      workspace,
      into: o.verify,
      commit: merged,
      timeoutMs: 600_000,
      // Only the agent's own objects are added (both sides are known): a merge's worth.
      maxRepoBytes: diskUsage(join(o.verify, 'objects')) + o.maxImportBytes,
    });
    return { ...ran, kind: 'merged', merged, said, report: [] };
  } catch (err) {
    return {
      ...ran,
      kind: 'unreadable',
      why: `the agent's ${o.branch} could not be read: ${errorMessage(err)}`,
    };
  }
}
