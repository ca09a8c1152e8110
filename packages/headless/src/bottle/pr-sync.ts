/**
 * The agent's side of bringing a resumed checkout up to date with its PR
 * branch: the forge sidecar fetches the branch with its token into its own
 * repository and leaves a bundle in its socket directory (see
 * `@bb/forge-sidecar`'s `bundlePrBranch`), then `<bundle>.done`. Before the
 * agent starts, the agent's own git, inside the bottle, waits for that, takes
 * the bundle into `refs/remotes/pr/<branch>` and fast-forwards the branch when
 * the checkout is clean. No git ever runs with the token in the agent's
 * repository, and the host runs none there.
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';

/** The bundle's name in the socket directory (the sidecar's `PR_BUNDLE`). */
export const PR_BUNDLE = 'pr-branch.bundle';

/** Remove a bundle an earlier turn left, before this turn's sidecar and agent start. */
export function clearPrBundle(sockDir: string): void {
  rmSync(join(sockDir, PR_BUNDLE), { force: true });
  rmSync(join(sockDir, `${PR_BUNDLE}.done`), { force: true });
}

/**
 * The shell lines that, inside the bottle and as the agent, take the bundle in
 * before the agent starts (waiting up to two minutes for the sidecar's
 * attempt). Never fails the start; says on stderr what it could not do.
 */
export function takeBundleScript(): string {
  return [
    'if [ -n "$BB_PR_BUNDLE" ]; then',
    '  i=0; while [ ! -e "$BB_PR_BUNDLE.done" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done',
    '  if [ ! -f "$BB_PR_BUNDLE" ]; then',
    '    echo "bb: the PR branch was not brought up to date: $(cat "$BB_PR_BUNDLE.done" 2>/dev/null || echo no answer from the sidecar)" >&2',
    '  elif ! out=$(git -C "$BB_WORKSPACE_DIR" fetch -q --no-tags "$BB_PR_BUNDLE" "+refs/bb/forge/$BB_PR_BRANCH:refs/remotes/pr/$BB_PR_BRANCH" 2>&1); then',
    '    echo "bb: could not take in the PR branch: $out" >&2',
    '  elif [ -n "$(git -C "$BB_WORKSPACE_DIR" status --porcelain --untracked-files=no 2>/dev/null)" ]; then',
    '    echo "bb: the PR branch is at refs/remotes/pr/$BB_PR_BRANCH (the checkout has uncommitted changes)" >&2',
    '  elif ! out=$(git -C "$BB_WORKSPACE_DIR" merge -q --ff-only "refs/remotes/pr/$BB_PR_BRANCH" 2>&1); then',
    '    echo "bb: the PR branch is at refs/remotes/pr/$BB_PR_BRANCH (not a fast-forward: $out)" >&2',
    '  fi',
    'fi',
  ].join('\n');
}

/** Where the host says a launch's workspace is ready (the socket directory, the gate's). */
export const WORKSPACE_READY = '.workspace-ready';

/**
 * The shell line that holds a launch's agent until its workspace is made and
 * owned (the host then writes `WORKSPACE_READY` beside the sockets): the agent's
 * container starts while the repository is checked out, its program only after.
 */
export function awaitWorkspaceScript(socketDir: string, maxMs: number): string {
  const tries = Math.max(1, Math.ceil(maxMs / 10));
  return `i=0; while [ ! -e ${socketDir}/${WORKSPACE_READY} ]; do [ $i -ge ${tries} ] && exit 70; sleep 0.01; i=$((i+1)); done`;
}
