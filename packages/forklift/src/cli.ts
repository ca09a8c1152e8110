import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { errorMessage } from '@bb/errors';
import { type Backend, DockerBackend } from '@bb/headless';
import { type ForkliftAgent, OUTCOMES, runForklift, runsDir } from './run';
import { listRuns, saveResult } from './runs';

export const FORKLIFT_USAGE = `Usage: forklift [--timeout 8m] [--image IMAGE] [--agent script --script FILE] [--json]
       forklift runs [--json]

Keep a fork in sync with its upstream. Run it in the fork's checkout (remotes origin
and upstream; nothing else to configure). forklift fetches both; a fast-forward or a
clean merge becomes a pull request with no agent at all. Otherwise an agent merges
upstream/main into main in a container holding a copy of the repository with no
remotes and no credentials, for at most --timeout; then the host, not the agent,
decides: STUCK.md is shown, or the agent's main is verified (every upstream and
every fork commit reachable) and only then pushed to forklift/sync-<time> and
proposed as a pull request into main, with the proof in its body.

FORK.md at the repository root, when present, is given to the agent as the fork's
constraints; a line "test: COMMAND" in it names the tests (and sends a clean merge to
the agent, to run them).

Options:
  --timeout DURATION  the agent's limit, e.g. 8m, 90s (default 8m)
  --image IMAGE       the agent's image (default forklift/kitchen-sink:latest)
  --agent NAME        script: a scripted agent (--script FILE, its steps as JSON)
  --json              print the result as JSON
  -h, --help          show this help

Environment:
  FORKLIFT_TOKEN (or FORGE_TOKEN)  the forge token for the push and the PR (host only)
  FORKLIFT_API        the forge API (default <origin>/api/v1, Gitea)
  XDG_STATE_HOME      runs are kept in $XDG_STATE_HOME/forklift/runs (~/.local/state)

Exit status: 0 synced (PR opened), 3 nothing to do, 4 stuck (STUCK.md),
5 timed out, 6 verification failed (no push, no PR), 1 error, 2 usage.
`;

export interface ForkliftIo {
  cwd: string;
  env: Record<string, string | undefined>;
  stdout: (s: string) => void;
  stderr: (s: string) => void;
}

const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/;
function duration(v: string): number | undefined {
  const m = DURATION.exec(v);
  if (!m) return undefined;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
}

/** The scripted agent: bot-bottle's script agent, its steps from a JSON file. */
function scriptAgent(file: string): (prompt: string) => ForkliftAgent {
  const steps = JSON.parse(readFileSync(file, 'utf8')) as unknown;
  const require = createRequire(import.meta.url);
  const bundle = join(
    dirname(require.resolve('@bb/headless/package.json')),
    'dist',
    'bundle',
    'script-agent.mjs',
  );
  return () => ({
    files: {
      'bin/script-agent.mjs': readFileSync(bundle),
      'home/.bb/script.json': JSON.stringify({ turns: [{ steps }] }),
      'run.sh':
        '#!/bin/sh\nexec node /harness-state/bin/script-agent.mjs --prompt "$(cat /harness-state/prompt.md)"\n',
    },
    cmd: ['sh', '/harness-state/run.sh'],
    env: {},
  });
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
        image: { type: 'string' },
        agent: { type: 'string' },
        script: { type: 'string' },
        json: { type: 'boolean' },
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
  const agentName = String(v['agent'] ?? 'script');
  if (agentName !== 'script' || !v['script']) {
    io.stderr(
      `forklift: --agent ${agentName}${v['script'] ? '' : ' --script FILE'}: this version runs the scripted agent (--agent script --script FILE); claude, codex and pi are not wired to forklift yet\n`,
    );
    return 2;
  }
  const token = io.env['FORKLIFT_TOKEN'] || io.env['FORGE_TOKEN'];
  if (!token) {
    io.stderr(
      'forklift: set FORKLIFT_TOKEN (or FORGE_TOKEN) to the forge token that pushes the branch and opens the PR\n',
    );
    return 2;
  }
  try {
    const result = await runForklift({
      checkout: resolve(io.cwd),
      env: io.env,
      backend: backend ?? new DockerBackend(),
      ...(v['image'] ? { image: String(v['image']) } : {}),
      ...(timeoutMs ? { timeoutMs } : {}),
      agent: scriptAgent(resolve(io.cwd, String(v['script']))),
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
