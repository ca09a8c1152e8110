/** What the agent is told: the task, the fork's constraints, and what failed. */

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

/** The whole prompt: the instructions, FORK.md, the test command, the failing tests' output. */
export function agentPrompt(o: {
  branch: string;
  forkMd: string;
  test?: string | undefined;
  failedTests?: string | undefined;
}): string {
  return [
    DEFAULT_INSTRUCTIONS(o.branch),
    o.forkMd ? `\n\nThe fork's own constraints (FORK.md):\n\n${o.forkMd}` : '',
    o.test ? `\n\nThe tests: ${o.test}` : '',
    o.failedTests !== undefined
      ? `\n\nThe merge has no textual conflict, but the tests fail on it (a semantic conflict). Their output ends:\n\n${o.failedTests}`
      : '',
    '\n',
  ].join('');
}
