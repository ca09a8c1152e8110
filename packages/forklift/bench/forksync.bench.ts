// ForkSync-Bench: forklift against what fork maintainers use today, on 40 deterministic
// fork/upstream scenarios (scenarios.ts), in one run. Some fork features are checked by
// the judge and by no test of FORK.md (hidden, silent-drop), some histories are of a
// realistic size (large), and some scripted agents lie or are careless on purpose.
// Tools:
//   forklift        the real thing: the Gitea-compatible test server, real git, real Docker,
//                   the scripted agent (deterministic resolutions, wrong ones and lies), or a
//                   real CLI when FORKSYNC_AGENT=claude|codex|pi (with its model key set)
//   git merge       a plain merge; a conflict means no PR
//   merge -X ours   conflicts resolved to the fork's side
//   merge -X theirs conflicts resolved to upstream's side
//   ff-or-fail      fast-forward or nothing (Gitea's "sync fork")
//   reset to upstream  what sync scripts that hard-reset do (the fork's commits go)
// Every result a tool would propose is judged the same way, in one fresh container: no
// conflict markers, every test either side ever wrote green (the scenario's own copies),
// the scenario's checks, and every fork commit kept. Per class: PRs opened, correct and
// incorrect merges, fork commits lost, STUCK precision and recall, wall time.
// Besides: (a) the share the host resolves with no agent, and its time; (b) the
// verifier's precision: every result of a bad play (wrong, lying, dropping, reverting or
// breaking the fork's work) refused; (c) runs per upstream commit: a second pass with
// nothing changed must do nothing (1.0).
// Goals (scripted model): (b) = 100%, (c) = 1, 0 incorrect results of the agent's, 0 fork
// commits lost, every run inside the limit, STUCK only where it is the right outcome. A
// clean merge that drops a feature no test covers is proposed by the host (as by git
// merge) and counted as incorrect: the figure says so; no verifier can see it.
import { execFile } from 'node:child_process';
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { closeGiteaPools } from '@bb/forge';
import { createGiteaTestServer } from '@bb/forge/testing';
import { DockerBackend } from '@bb/headless';
import { QUICK, reportBench } from '@bb/tooling/bench';
import { probeDocker } from '@bb/tooling/docker';
import { type AgentChoice, type AgentName, modelRouteFromEnv } from '../src/agent';
import { runBounded } from '../src/disk';
import { runForklift } from '../src/run';
import { agentSteps, BAD_PLAYS, type Scenario, scenarios } from './scenarios';

process.on('unhandledRejection', (e) => {
  console.error(e);
  process.exit(1);
});

const exec = promisify(execFile);
const docker = await probeDocker();
if (!docker.ok) {
  console.log(`forksync: no Docker engine (${docker.reason}); the benchmark needs one`);
  process.exit(process.env['BB_REQUIRE_DOCKER'] === '1' ? 1 : 0);
}
const backend = new DockerBackend();
const IMAGE = await (async () => {
  for (const i of [process.env['FORKLIFT_IMAGE'], 'forklift/kitchen-sink:latest'])
    if (
      i &&
      (await exec('docker', ['image', 'inspect', i]).then(
        () => true,
        () => false,
      ))
    )
      return i;
  return 'bb-base:latest';
})();
const LIMIT_MS = 8 * 60_000;
const TOKEN = 'forksync-bench-token-0001';
const real = process.env['FORKSYNC_AGENT'] as AgentName | undefined;

const AS = {
  GIT_AUTHOR_NAME: 'Bench',
  GIT_AUTHOR_EMAIL: 'bench@example.test',
  GIT_COMMITTER_NAME: 'Bench',
  GIT_COMMITTER_EMAIL: 'bench@example.test',
  GIT_TERMINAL_PROMPT: '0',
};
const git = async (cwd: string, ...args: string[]) =>
  (
    await exec('git', args, { cwd, env: { ...process.env, ...AS }, maxBuffer: 64 * 1024 ** 2 })
  ).stdout.trim();
const ok = (p: Promise<unknown>) =>
  p.then(
    () => true,
    () => false,
  );

// FORKSYNC_ONLY=<regex> runs the scenarios whose id matches (for work on one; no goal is judged then).
const only = process.env['FORKSYNC_ONLY'];
// Quick mode (`pnpm bench --quick`): every eighth scenario, to show the benchmark runs.
const list = scenarios()
  .filter((s) => !only || new RegExp(only).test(s.id))
  .filter((_, i) => !QUICK || i % 8 === 0);
const root = mkdtempSync(join(tmpdir(), 'bb-forksync-'));
const gitea = await createGiteaTestServer({
  world: {
    users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
    orgs: [{ name: 'acme', members: ['alice'] }],
    repos: list.flatMap((s) => [
      { owner: 'acme', name: s.id },
      { owner: 'bot', name: s.id },
    ]),
  },
});
const cleanup = async () => {
  await gitea.close();
  await closeGiteaPools();
  rmSync(root, { recursive: true, force: true });
};
process.on('exit', () => rmSync(root, { recursive: true, force: true }));

/** Write a commit's files into a work tree. */
function apply(dir: string, files: Record<string, string | null>) {
  for (const [p, c] of Object.entries(files)) {
    const f = join(dir, p);
    if (c === null) rmSync(f, { force: true });
    else {
      mkdirSync(join(f, '..'), { recursive: true });
      writeFileSync(f, c);
    }
  }
}

/** Upstream with the base and its commits; the fork with the base and its own; the operator's checkout. */
async function setUp(s: Scenario) {
  const work = join(root, 'work', s.id);
  mkdirSync(work, { recursive: true });
  await git(work, 'init', '-q', '-b', 'main');
  apply(work, s.base);
  await git(work, 'add', '-A');
  await git(work, 'commit', '-qm', 'Base');
  const up = gitea.git.dirOf('acme', s.id);
  const fork = gitea.git.dirOf('bot', s.id);
  await git(work, 'push', '-q', '-f', fork, 'HEAD:refs/heads/main');
  for (const c of s.fork) {
    apply(work, c.files);
    await git(work, 'add', '-A');
    await git(work, 'commit', '-qm', c.message);
  }
  await git(work, 'push', '-q', '-f', fork, 'HEAD:refs/heads/main');
  await git(work, 'reset', '-q', '--hard', 'HEAD~' + s.fork.length);
  for (const c of s.upstream) {
    apply(work, c.files);
    await git(work, 'add', '-A');
    await git(work, 'commit', '-qm', c.message);
  }
  await git(work, 'push', '-q', '-f', up, 'HEAD:refs/heads/main');
  const checkout = join(root, 'checkouts', s.id);
  await git(root, 'clone', '-q', gitea.cloneUrl(`bot/${s.id}`), checkout);
  await git(checkout, 'remote', 'add', 'upstream', gitea.cloneUrl(`acme/${s.id}`));
  await git(checkout, 'fetch', '-q', 'upstream');
  return { checkout, forkHead: await git(checkout, 'rev-parse', 'origin/main') };
}

type Tool =
  | 'forklift'
  | 'git merge'
  | 'merge -X ours'
  | 'merge -X theirs'
  | 'ff-or-fail'
  | 'reset to upstream';
const TOOLS: Tool[] = [
  'forklift',
  'git merge',
  'merge -X ours',
  'merge -X theirs',
  'ff-or-fail',
  'reset to upstream',
];
interface Run {
  tool: Tool;
  scenario: Scenario;
  /** The commit it would propose (a PR), if any. */
  result?: { repo: string; commit: string };
  stuck: boolean;
  outcome: string;
  ms: number;
  forkHead: string;
  correct?: boolean;
  forkLost?: boolean;
  why?: string;
  /** forklift only: whether an agent ran, and whether its own result was proposed. */
  agentRan?: boolean;
  proposedAgents?: boolean;
  partial?: boolean;
}
const runs: Run[] = [];

async function baseline(
  tool: Exclude<Tool, 'forklift'>,
  s: Scenario,
  checkout: string,
  forkHead: string,
) {
  const dir = join(root, 'baselines', tool.replace(/\W+/g, '-'), s.id);
  const t0 = performance.now();
  await git(root, 'clone', '-q', '--no-local', checkout, dir);
  await git(dir, 'fetch', '-q', checkout, 'refs/remotes/upstream/main:refs/remotes/upstream/main');
  const args = {
    'git merge': ['merge', '-q', '--no-edit', 'upstream/main'],
    'merge -X ours': ['merge', '-q', '--no-edit', '-X', 'ours', 'upstream/main'],
    'merge -X theirs': ['merge', '-q', '--no-edit', '-X', 'theirs', 'upstream/main'],
    'ff-or-fail': ['merge', '-q', '--ff-only', 'upstream/main'],
    'reset to upstream': ['reset', '-q', '--hard', 'upstream/main'],
  }[tool];
  const merged = await ok(git(dir, ...args));
  const ms = performance.now() - t0;
  runs.push({
    tool,
    scenario: s,
    ...(merged ? { result: { repo: dir, commit: await git(dir, 'rev-parse', 'HEAD') } } : {}),
    stuck: false,
    outcome: merged ? 'merged' : 'failed',
    ms,
    forkHead,
  });
}

console.log(
  `forksync: ${list.length} scenarios, image ${IMAGE}, agent ${real ?? 'script (scripted model)'}`,
);
const checkouts = new Map<string, string>();
const forklift = (s: Scenario, checkout: string) => {
  const agent: AgentChoice = real
    ? { name: real, modelRoute: modelRouteFromEnv(real, process.env).route, allow: [] }
    : { name: 'script', script: agentSteps(s), allow: [] };
  return runForklift({
    checkout,
    env: {
      ...process.env,
      FORKLIFT_API: gitea.apiUrl,
      XDG_STATE_HOME: join(root, 'state'),
      BB_HOME: join(root, 'bbhome'),
    },
    backend,
    image: IMAGE,
    timeoutMs: LIMIT_MS,
    agent,
    ...(real ? { agentSecrets: modelRouteFromEnv(real, process.env).secrets } : {}),
    token: TOKEN,
  }).catch((e: Error) => ({
    outcome: 'error',
    detail: e.message,
    pr: undefined,
    merged: undefined,
    agentRan: false,
  }));
};
for (const s of list) {
  const { checkout, forkHead } = await setUp(s);
  checkouts.set(s.id, checkout);
  const t0 = performance.now();
  const r = await forklift(s, checkout);
  const ms = performance.now() - t0;
  const bare = gitea.git.dirOf('bot', s.id);
  const partial = r.outcome === 'partial';
  runs.push({
    tool: 'forklift',
    scenario: s,
    // A partial sync proposes a prefix of upstream, by the host: not a whole merge to judge.
    ...(r.pr && r.merged && !partial ? { result: { repo: bare, commit: r.merged } } : {}),
    stuck: r.outcome === 'stuck',
    outcome: r.outcome,
    ms,
    forkHead,
    agentRan: r.agentRan,
    proposedAgents: r.agentRan && r.outcome === 'synced',
    partial,
    ...(r.outcome === 'error' ? { why: r.detail } : {}),
  });
  for (const tool of TOOLS.slice(1) as Array<Exclude<Tool, 'forklift'>>)
    await baseline(tool, s, checkout, forkHead);
  process.stdout.write(
    `  ${s.id.padEnd(24)} forklift: ${r.outcome} (${Math.round(ms)} ms)${r.outcome === 'synced' ? '' : `: ${r.detail.split('\n')[0]!.slice(0, 160)}`}\n`,
  );
}

// (c) The next night, nothing changed: every run must do nothing (no agent, no push).
let secondPassActed = 0;
for (const s of list) {
  const bare = gitea.git.dirOf('bot', s.id);
  const heads = () =>
    git(root, '--git-dir', bare, 'for-each-ref', '--format=%(refname) %(objectname)', 'refs/heads');
  const before = await heads();
  const r = await forklift(s, checkouts.get(s.id)!);
  const acted =
    r.agentRan || (await heads()) !== before || !['nothing-to-do', 'unchanged'].includes(r.outcome);
  if (acted) {
    secondPassActed++;
    console.log(`  second pass acted on ${s.id}: ${r.outcome} (${r.detail})`);
  }
}

// Judge every proposed result the same way: checked out by the host, the scenario's truth run
// in one fresh container with no network.
const evalDir = join(root, 'eval');
mkdirSync(evalDir, { recursive: true });
const judged = runs.filter((r) => r.result);
for (const [i, r] of judged.entries()) {
  const dir = join(evalDir, String(i));
  mkdirSync(dir);
  await exec('sh', [
    '-c',
    `git --git-dir="$1" archive "$2" | tar -x -C "$3"`,
    'sh',
    join(r.result!.repo, r.result!.repo.endsWith('.git') ? '' : '.git'),
    r.result!.commit,
    dir,
  ]);
  writeFileSync(join(dir, '.truth.sh'), r.scenario.truth);
  r.forkLost = !(await ok(
    git(
      root,
      '--git-dir',
      join(r.result!.repo, r.result!.repo.endsWith('.git') ? '' : '.git'),
      'merge-base',
      '--is-ancestor',
      r.forkHead,
      r.result!.commit,
    ),
  ));
  r.why = markers(dir) ? 'conflict markers' : undefined;
}
if (process.getuid?.() === 0) await exec('chown', ['-R', '1000:1000', evalDir]);
const id = await backend.create({
  name: `forksync-judge-${Date.now()}`,
  image: IMAGE,
  cmd: [
    'sh',
    '-c',
    'for d in *; do if (cd "$d" && sh .truth.sh >/dev/null 2>&1); then echo "$d ok"; else echo "$d fail"; fi; done',
  ],
  user: '1000:1000',
  workdir: '/eval',
  labels: { 'bb.slug': 'forksync-judge', 'bb.role': 'judge' },
  network: 'none',
  readOnlyRootfs: true,
  tmpfs: { '/tmp': 'rw,size=64m' },
  mounts: [{ source: evalDir, target: '/eval' }],
  resources: { memoryBytes: 512 * 1024 ** 2, pidsLimit: 256 },
});
try {
  await runBounded(backend, id, 300_000);
  const verdicts = new Map(
    (await backend.logs(id))
      .split('\n')
      .map((l) => l.trim().split(' '))
      .filter((p) => p.length === 2)
      .map(([d, v]) => [Number(d), v === 'ok']),
  );
  for (const [i, r] of judged.entries()) {
    const green = verdicts.get(i) === true;
    r.correct = green && !r.forkLost && !r.why;
    r.why ??= r.forkLost ? 'fork commits lost' : green ? undefined : 'tests red';
  }
} finally {
  await backend.destroy(id).catch(() => {});
}

function markers(dir: string): boolean {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    const st = lstatSync(p);
    if (st.isDirectory()) {
      if (markers(p)) return true;
    } else if (st.isFile() && /^(<<<<<<<|>>>>>>>) /m.test(readFileSync(p, 'utf8'))) return true;
  }
  return false;
}

// Per tool and class.
interface Tally {
  runs: number;
  pr: number;
  correct: number;
  incorrect: number;
  forkLost: number;
  stuckTp: number;
  stuckFp: number;
  stuckFn: number;
  insideLimit: number;
  ms: number;
}
const tally = (rs: Run[]): Tally => ({
  runs: rs.length,
  pr: rs.filter((r) => r.result).length,
  correct: rs.filter((r) => r.correct).length,
  incorrect: rs.filter((r) => r.result && !r.correct).length,
  forkLost: rs.filter((r) => r.forkLost).length,
  stuckTp: rs.filter((r) => r.stuck && r.scenario.right === 'stuck').length,
  stuckFp: rs.filter((r) => r.stuck && r.scenario.right !== 'stuck').length,
  stuckFn: rs.filter((r) => !r.stuck && r.scenario.right === 'stuck').length,
  insideLimit: rs.filter((r) => r.ms <= LIMIT_MS && r.outcome !== 'timed-out').length,
  ms: rs.reduce((a, r) => a + r.ms, 0),
});
const classes = [...new Set(list.map((s) => s.cls))];
const rows: string[][] = [];
for (const tool of TOOLS)
  for (const cls of [...classes, 'all']) {
    const t = tally(
      runs.filter((r) => r.tool === tool && (cls === 'all' || r.scenario.cls === cls)),
    );
    rows.push([
      tool,
      cls,
      String(t.runs),
      String(t.pr),
      String(t.correct),
      String(t.incorrect),
      String(t.forkLost),
      tool === 'forklift' ? `${t.stuckTp}/${t.stuckFp}/${t.stuckFn}` : '-',
      `${Math.round(t.ms)}`,
    ]);
  }
const head = [
  'tool',
  'class',
  'runs',
  'PRs',
  'correct',
  'incorrect',
  'fork lost',
  'STUCK tp/fp/fn',
  'ms',
];
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
const line = (c: string[]) => c.map((x, i) => x.padEnd(widths[i]!)).join('  ');
console.log(`\n${line(head)}\n${widths.map((w) => '-'.repeat(w)).join('  ')}`);
for (const r of rows) console.log(line(r));
for (const r of runs.filter((x) => x.tool === 'forklift' && x.outcome === 'error'))
  console.log(`  forklift error on ${r.scenario.id}: ${r.why}`);

const f = tally(runs.filter((r) => r.tool === 'forklift'));
const mergeable = list.filter((s) => s.right === 'pr').length;
const best = Math.max(
  ...TOOLS.slice(1).map((t) => tally(runs.filter((r) => r.tool === t)).correct),
);
const stuckPrecision = f.stuckTp + f.stuckFp ? f.stuckTp / (f.stuckTp + f.stuckFp) : 1;
const stuckRecall = f.stuckTp + f.stuckFn ? f.stuckTp / (f.stuckTp + f.stuckFn) : 1;
const errors = runs.filter((r) => r.tool === 'forklift' && r.outcome === 'error').length;
const forkliftRuns = runs.filter((r) => r.tool === 'forklift');
// (a) The host alone.
const byHost = forkliftRuns.filter((r) => r.outcome === 'synced' && !r.agentRan);
// (b) Bad plays: the agent's own result must never be proposed.
const bad = forkliftRuns.filter((r) => r.agentRan && BAD_PLAYS.has(r.scenario.play));
const refused = bad.filter((r) => !r.proposedAgents);
const verifierPrecision = bad.length ? refused.length / bad.length : 1;
for (const r of bad.filter((x) => x.proposedAgents))
  console.log(`  verifier accepted a bad result on ${r.scenario.id} (${r.scenario.play})`);
const agentIncorrect = forkliftRuns.filter(
  (r) => r.proposedAgents && r.result && !r.correct,
).length;
const hostIncorrect = byHost.filter((r) => r.result && !r.correct);
// (c) Runs that did something, per upstream state: 1 when the second pass did nothing.
const runsPerUpstream = (forkliftRuns.length + secondPassActed) / forkliftRuns.length;
const extra: Record<string, number | string> = {
  scenarios: list.length,
  agent: real ?? 'script',
  'forklift.incorrect': f.incorrect,
  'forklift.forkLost': f.forkLost,
  'forklift.insideLimit': `${f.insideLimit}/${f.runs}`,
  'forklift.stuckPrecision': stuckPrecision,
  'forklift.stuckRecall': stuckRecall,
  'forklift.errors': errors,
  'forklift.wallMs': Math.round(f.ms),
  'host.resolvedShare': Math.round((byHost.length / forkliftRuns.length) * 1000) / 1000,
  'host.resolved': byHost.length,
  'host.ms': Math.round(byHost.reduce((a, r) => a + r.ms, 0)),
  'verifier.badResults': bad.length,
  'verifier.refused': refused.length,
  'verifier.precision': verifierPrecision,
  'forklift.incorrectAgentResults': agentIncorrect,
  'forklift.incorrectHostMerges': hostIncorrect.map((r) => r.scenario.id).join(',') || 'none',
  'forklift.partial': forkliftRuns.filter((r) => r.partial).length,
  'idempotence.runsPerUpstreamCommit': runsPerUpstream,
};
console.log(
  `\n(a) the host alone: ${byHost.length} of ${forkliftRuns.length} (${Math.round((byHost.length / forkliftRuns.length) * 100)}%) in ${Math.round(byHost.reduce((a, r) => a + r.ms, 0))} ms; (b) the verifier refused ${refused.length} of ${bad.length} bad results; (c) ${runsPerUpstream} runs per upstream commit` +
    (hostIncorrect.length
      ? `\n    the host proposed ${hostIncorrect.length} clean merge(s) the judge refuses (${hostIncorrect.map((r) => r.scenario.id).join(', ')}): a feature no test covers, dropped without a conflict`
      : ''),
);
for (const t of TOOLS.slice(1)) {
  const x = tally(runs.filter((r) => r.tool === t));
  extra[`${t}.correct`] = x.correct;
  extra[`${t}.incorrect`] = x.incorrect;
  extra[`${t}.forkLost`] = x.forkLost;
}
await cleanup();
const pass =
  verifierPrecision === 1 &&
  runsPerUpstream === 1 &&
  agentIncorrect === 0 &&
  f.forkLost === 0 &&
  f.insideLimit === f.runs &&
  stuckPrecision === 1 &&
  errors === 0;
console.log('');
if (only) {
  console.log(`FORKSYNC_ONLY=${only}: a part of the set; no result is written and no goal judged`);
  process.exit(0);
}
reportBench({
  name: 'forksync',
  metric: `correct merges of ${mergeable} mergeable scenarios: forklift vs the best baseline`,
  ours: f.correct,
  baseline: best,
  goal: 0,
  higherIsBetter: true,
  target:
    'the verifier refuses 100% of bad results, 1 run per upstream commit, 0 incorrect agent results, 0 fork commits lost, all inside the limit, STUCK precision 1',
  pass,
  extra,
});
process.exit(0);
