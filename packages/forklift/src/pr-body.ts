/** The sync PR's title and body: what was merged, how, and what the host checked. */
import type { ForkWorkCheck } from './fork-work';
import { fenced, plain } from './propose';
import type { TestRun, TreeCheck } from './verify';

const list = (xs: string[]) =>
  xs.slice(0, 100).join('\n') + (xs.length > 100 ? `\n… and ${xs.length - 100} more` : '');

export const syncTitle = (branch: string) => `Sync ${branch} with upstream`;

export interface SyncBody {
  branch: string;
  upstream: string;
  fork: string;
  merged: string;
  how: string;
  proof: string[];
  warnings: string[];
  seconds: number;
}

export function syncBody(b: SyncBody): string {
  return [
    `forklift merged upstream \`${b.branch}\` into the fork's \`${b.branch}\` (${b.how}).`,
    // Warnings hold git's and the forge's words: shown as text.
    ...b.warnings.flatMap((w) => fenced('**Warning:**', plain(w))),
    '',
    `- upstream \`${b.branch}\`: \`${b.upstream}\``,
    `- fork \`${b.branch}\`: \`${b.fork}\``,
    `- result: \`${b.merged}\``,
    `- checked on the host: upstream \`${b.branch}\` is an ancestor of the result; the fork's \`${b.branch}\` is an ancestor of the result`,
    ...b.proof,
    `- time used: ${b.seconds} s`,
    '',
    'forklift updates this PR (its branch and this description) when upstream moves, and opens no other while it is open.',
  ].join('\n');
}

/** What the fork-work check found, for the PR body (paths are anyone's bytes: fenced). */
export function forkWorkProof(w: ForkWorkCheck): string[] {
  const line = `- the fork's own changes (${w.checked} path${w.checked === 1 ? '' : 's'} since the merge base) were looked for in the result, file by file and change by change: none was found undone (a check of files and lines, not of what the code means)`;
  if (!w.reworked.length) return [line];
  return [
    line,
    ...fenced(
      "Where the fork's changes are in the result in another form (review these):",
      list(w.reworked),
    ),
  ];
}

/** The conflicts resolved and the paths changed beyond them, as text in a fence (names are anyone's bytes). */
export function pathLists(check: TreeCheck): string[] {
  if (!check.conflicted.length && !check.beyond.length)
    return ['- the merge had no textual conflict, and nothing changed beyond it'];
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

/** What the host's run of the fork's tests proves, for the PR body. */
export function testsProof(command: string | undefined, r: TestRun | undefined): string[] {
  return r
    ? [
        `- the fork's tests (\`${command}\`), run by the host on the result in a fresh container with no network: passed in ${Math.round(r.durationMs / 1000)} s`,
      ]
    : ['- the fork declares no test command (FORK.md `test:`): no tests were run by the host'];
}

/** The host's test run, as the result reports it. */
export function testsField(r: TestRun | undefined) {
  return r
    ? { tests: { ok: r.ok, exitCode: r.exitCode, timedOut: r.timedOut, durationMs: r.durationMs } }
    : {};
}
