import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { errorMessage } from '@bb/errors';
import { type Backend, DockerBackend, memoryBytes, namesInWords } from '@bb/headless';
import {
  type AgentChoice,
  agentNames,
  DEFAULT_ALLOW,
  modelRouteFromEnv,
  readScript,
} from './agent';
import { OUTCOMES, runForklift, runsDir } from './run';
import { listRuns, saveResult } from './runs';

export const FORKLIFT_USAGE = `Usage: forklift [--agent ${agentNames().join('|')}] [--model M] [--timeout 8m] [--image IMAGE] [--force] [--json]
       forklift runs [--json]

Keep a fork in sync with its upstream. Run it in the fork's checkout (remotes origin,
the fork on its forge, and upstream, any URL git fetches: a forge, a local path,
file://). forklift fetches both; a fast-forward, or a clean merge whose tests pass,
becomes a pull request with no agent at all. Otherwise an agent merges upstream/main
into main in a container holding a copy of the repository with no remotes and no
credentials, for at most --timeout; then the host, not the agent, decides: STUCK.md
is shown, or the agent's main is verified (every upstream and every fork commit
reachable, none of the fork's own changes undone, CI and protected files untouched by
the agent, the fork's tests green in a fresh container) and only then pushed.

One sync branch (forklift/sync; forklift/sync-<branch> for --branch) and one open pull
request into main, updated when upstream moves. Run it every night: when upstream has
not moved since the open PR, or since a run that was stuck or failed (and FORK.md is
unchanged), nothing is pushed, opened or run. When the whole range cannot be merged,
the PR takes upstream up to the furthest commit the host merges cleanly (and green). A
run that leaves the fork behind opens (or updates) one issue on the fork saying why; the
next full sync closes it. A sync PR that
was squash-merged is detected: forklift records upstream's commits as merged in the
next PR and warns.

FORK.md at the repository root of the fork's main, when present, is given to the
agent as the fork's constraints. Lines in it the host reads:
  test: COMMAND     the fork's tests, run by the host on every result
  protect: GLOB     paths the agent may not write (like CI files, always protected)

Options:
  --agent NAME        claude (default), codex, pi, or script (--script FILE: a scripted
                      agent, its steps as a JSON array)
  --model NAME        the model the agent asks for
  --timeout DURATION  the agent's limit, e.g. 8m, 90s (default 8m)
  --test-timeout DURATION  the limit of one run of the fork's tests (default 5m)
  --branch NAME       the branch both sides are merged on (default main)
  --allow HOST        another host the agent may reach (repeatable); claude, codex and pi
                      may reach the package registries (npm, PyPI, crates.io, Go,
                      RubyGems, Maven, Gradle, NuGet) by default, the script agent nothing
  --offline           no outbound network for the agent but its model (not with --allow)
  --disk SIZE         what the agent may write to its workspace and home, e.g. 10g,
                      512m (default 10g); past it the agent is stopped (exit 1)
  --image IMAGE       the agent's image (default forklift/kitchen-sink:latest, built by
                      scripts/build-kitchen-sink-image.sh)
  --force             run even when nothing changed since the last run, and remake an
                      open sync PR on the fork's current main
  --no-issue          open, update or close no issue on the fork
  --json              print the result as JSON
  -h, --help          show this help

Environment:
  FORKLIFT_TOKEN (or FORGE_TOKEN)  the forge token for the push and the PR (host only)
  FORKLIFT_FORGE_KIND the fork's forge kind (default FORGE_KIND, else the kind that
                      owns origin's host, else gitea); any registered kind
  FORKLIFT_API        the forge API (default <origin>/api/v1, Gitea)
  ANTHROPIC_API_KEY   claude's and pi's model key, OPENAI_API_KEY codex's: held by the
                      credential proxy, never in the agent's container
  FORKLIFT_MODEL_URL  the model API's base URL (default Anthropic's or OpenAI's)
  XDG_STATE_HOME      runs are kept in $XDG_STATE_HOME/forklift/runs (~/.local/state),
                      the last outcome per fork and branch in .../forklift/state

Exit status: 0 synced (PR opened or updated), 3 nothing to do, 4 stuck (STUCK.md),
5 timed out, 6 verification failed (no push, no PR), 7 unchanged since a run that was
stuck or failed (not retried), 8 partial (the PR takes upstream up to the first commit
that blocks; the issue on the fork says why), 1 error, 2 usage.
`;

export interface ForkliftIo {
  cwd: string;
  env: Record<string, string | undefined>;
  stdout: (s: string) => void;
  stderr: (s: string) => void;
}

/** A size such as 10g or 512m, in bytes; at least 16 MiB. */
function size(v: string): number | undefined {
  const text = v.trim().toLowerCase();
  const bytes = /^\d+(\.\d+)?[kmg]$/.test(text) ? memoryBytes(text) : undefined;
  return bytes && bytes >= 16 * 1024 ** 2 ? bytes : undefined;
}

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/;
function duration(v: string): number | undefined {
  const m = DURATION.exec(v);
  if (!m) return undefined;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
}

/** Run `forklift` with `argv`; resolves the exit status. */
export async function runForkliftCli(
  argv: string[],
  io: ForkliftIo,
  backend?: Backend,
): Promise<number> {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        timeout: { type: 'string' },
        'test-timeout': { type: 'string' },
        image: { type: 'string' },
        model: { type: 'string' },
        allow: { type: 'string', multiple: true },
        offline: { type: 'boolean' },
        disk: { type: 'string' },
        branch: { type: 'string' },
        agent: { type: 'string' },
        script: { type: 'string' },
        json: { type: 'boolean' },
        force: { type: 'boolean' },
        'no-issue': { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    io.stderr(`forklift: ${errorMessage(err)}\n\n${FORKLIFT_USAGE}`);
    return 2;
  }
  const v = parsed.values as Record<string, string | boolean | undefined>;
  if (v['help']) {
    io.stdout(FORKLIFT_USAGE);
    return 0;
  }
  if (parsed.positionals[0] === 'runs') {
    const runs = listRuns(runsDir(io.env));
    if (v['json']) io.stdout(`${JSON.stringify(runs, null, 2)}\n`);
    else if (!runs.length) io.stdout(`no runs in ${runsDir(io.env)}\n`);
    else
      for (const r of runs)
        io.stdout(
          `${r.startedAt}  ${r.project}  ${r.outcome.padEnd(19)} ${r.pr ? `PR #${r.pr.number}  ` : ''}${r.detail}\n`,
        );
    return 0;
  }
  if (parsed.positionals.length) {
    io.stderr(`forklift: unexpected ${JSON.stringify(parsed.positionals[0])}\n\n${FORKLIFT_USAGE}`);
    return 2;
  }
  const timeoutMs = v['timeout'] === undefined ? undefined : duration(String(v['timeout']));
  if (v['timeout'] !== undefined && !timeoutMs) {
    io.stderr(`forklift: --timeout ${v['timeout']} is not a duration such as 8m or 90s\n`);
    return 2;
  }
  const testTimeout = v['test-timeout'];
  const testTimeoutMs = testTimeout === undefined ? undefined : duration(String(testTimeout));
  if (testTimeout !== undefined && !testTimeoutMs) {
    io.stderr(`forklift: --test-timeout ${testTimeout} is not a duration such as 5m or 90s\n`);
    return 2;
  }
  const token = io.env['FORKLIFT_TOKEN'] || io.env['FORGE_TOKEN'];
  if (!token) {
    io.stderr(
      'forklift: set FORKLIFT_TOKEN (or FORGE_TOKEN) to the forge token that pushes the branch and opens the PR\n',
    );
    return 2;
  }
  const diskText = v['disk'] === undefined ? undefined : String(v['disk']);
  const diskBytes = diskText === undefined ? undefined : size(diskText);
  if (diskText !== undefined && !diskBytes) {
    io.stderr(`forklift: --disk ${diskText} is not a size of at least 16m, such as 10g or 512m\n`);
    return 2;
  }
  const agentName = String(v['agent'] ?? 'claude');
  if (!agentNames().includes(agentName)) {
    io.stderr(`forklift: --agent ${agentName}: use ${namesInWords(agentNames())}\n`);
    return 2;
  }
  if ((agentName === 'script') !== (v['script'] !== undefined)) {
    io.stderr(
      agentName === 'script'
        ? 'forklift: --agent script needs --script FILE (a JSON array of script-agent steps)\n'
        : `forklift: --script is for --agent script, not --agent ${agentName}\n`,
    );
    return 2;
  }
  const extra = ((parsed.values as { allow?: string[] }).allow ?? []).map((h) => h.trim());
  const bad = extra.find((h) => !/^[a-z0-9.-]+(:\d{1,5})?$/i.test(h) || h.startsWith('*'));
  if (bad !== undefined) {
    io.stderr(
      `forklift: --allow ${JSON.stringify(bad)} is not a host name (such as pypi.org or pypi.org:443)\n`,
    );
    return 2;
  }
  if (v['offline'] && extra.length) {
    io.stderr('forklift: --offline and --allow contradict each other: give one\n');
    return 2;
  }
  const branch = v['branch'] === undefined ? 'main' : String(v['branch']);
  if (
    !/^[A-Za-z0-9][A-Za-z0-9._/-]{0,200}$/.test(branch) ||
    branch.includes('..') ||
    branch.endsWith('.lock')
  ) {
    io.stderr(`forklift: --branch ${JSON.stringify(branch)} is not a branch name\n`);
    return 2;
  }
  let choice: AgentChoice;
  let agentSecrets: Record<string, string> = {};
  try {
    const model = v['model'] === undefined ? undefined : String(v['model']);
    const allow = v['offline'] ? extra : [...DEFAULT_ALLOW, ...extra];
    if (agentName === 'script')
      choice = {
        name: 'script',
        script: readScript(resolve(io.cwd, String(v['script']))),
        allow: v['offline'] || !extra.length ? [] : extra,
        model,
      };
    else {
      const m = modelRouteFromEnv(agentName, io.env);
      choice = { name: agentName, model, modelRoute: m.route, allow };
      agentSecrets = m.secrets;
    }
  } catch (err) {
    io.stderr(`forklift: ${errorMessage(err)}\n`);
    return 2;
  }
  try {
    const result = await runForklift({
      checkout: resolve(io.cwd),
      env: io.env,
      backend: backend ?? new DockerBackend(),
      ...(v['image'] ? { image: String(v['image']) } : {}),
      ...(timeoutMs ? { timeoutMs } : {}),
      ...(testTimeoutMs ? { testTimeoutMs } : {}),
      ...(diskBytes ? { diskBytes } : {}),
      branch,
      ...(v['force'] ? { force: true } : {}),
      ...(v['no-issue'] ? { notify: false } : {}),
      agent: choice,
      agentSecrets,
      token,
      onProgress: (l) => io.stderr(`forklift: ${l}\n`),
    });
    saveResult(result.runDir, result);
    if (v['json']) io.stdout(`${JSON.stringify(result, null, 2)}\n`);
    else {
      io.stdout(`${result.outcome}: ${result.detail}\n`);
      if (result.pr) io.stdout(`${result.pr.url}\n`);
      if (result.stuck) io.stdout(`\nSTUCK.md:\n${result.stuck}\n`);
    }
    return OUTCOMES[result.outcome];
  } catch (err) {
    io.stderr(`forklift: ${errorMessage(err)}\n`);
    return 1;
  }
}
