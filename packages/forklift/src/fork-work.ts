/**
 * Whether the fork's own work survived a merge: every change the fork made to the
 * common ancestor (its files, its hunks, its deletions) is looked for in the result,
 * all read as data in forklift's own repository. A change that is gone is a revert,
 * and the result is refused; a change that is there in another shape (the agent
 * adapted it to upstream) is listed for review.
 */
import { unquotePath } from './verify';

export interface ForkWorkCheck {
  /** The fork's changes that the result undoes (each a path and what was lost). */
  reverted: string[];
  /** Paths where the fork's change is there, but not as the fork wrote it. */
  reworked: string[];
  /** How many of the fork's changed paths were checked. */
  checked: number;
  /** Paths too large or too many to compare line by line (compared as whole files only). */
  wholeFileOnly: number;
}

type Git = (args: string[]) => Promise<string>;

/** Word tokens of a line; a line of punctuation alone has none and proves nothing. */
const tokens = (line: string) => new Set(line.match(/[A-Za-z0-9_]+/g) ?? []);

/** Whether some line of `lines` keeps at least half the words of `line`. */
function survives(line: string, lines: Array<Set<string>>): boolean {
  const want = tokens(line);
  if (!want.size) return true;
  return lines.some((have) => {
    let n = 0;
    for (const t of want) if (have.has(t)) n++;
    return n * 2 >= want.size;
  });
}

interface Hunk {
  removed: string[];
  added: string[];
}

/** `git diff -U0` output, per path: its hunks' removed and added lines. */
function parseHunks(diff: string): Map<string, Hunk[]> {
  const out = new Map<string, Hunk[]>();
  let hunks: Hunk[] | undefined;
  let hunk: Hunk | undefined;
  for (const line of diff.split('\n')) {
    if (line.startsWith('diff --git ')) {
      hunks = undefined;
      hunk = undefined;
    } else if (line.startsWith('+++ ')) {
      const p = line.slice(4);
      if (p === '/dev/null') continue;
      hunks = [];
      out.set(unquotePath(p).replace(/^b\//, ''), hunks);
    } else if (line.startsWith('@@')) {
      hunk = { removed: [], added: [] };
      hunks?.push(hunk);
    } else if (hunk && line.startsWith('+')) hunk.added.push(line.slice(1));
    else if (hunk && line.startsWith('-')) hunk.removed.push(line.slice(1));
  }
  return out;
}

/** `git diff --raw -z` between two commits: path → [status, new blob]. */
async function rawDiff(git: Git, a: string, b: string): Promise<Map<string, [string, string]>> {
  const out = new Map<string, [string, string]>();
  const parts = (await git(['diff', '--no-renames', '--raw', '-z', a, b])).split('\0');
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const meta = parts[i]!.split(' ');
    out.set(parts[i + 1]!, [meta[4]!.charAt(0), meta[3]!]);
  }
  return out;
}

const MAX_LINE_CHECKED_FILES = 500;
const MAX_BLOB = 1024 * 1024;

/**
 * Check that `merged` keeps the fork's work: the changes from `base` (the merge base)
 * to `fork`. Runs git in forklift's own repository only (`git`).
 */
export async function checkForkWork(
  git: Git,
  c: { base: string; fork: string; upstream: string; merged: string },
): Promise<ForkWorkCheck> {
  const forkChanges = await rawDiff(git, c.base, c.fork);
  // Only where the result differs from the fork can the fork's work have gone.
  const differs = await rawDiff(git, c.fork, c.merged);
  const upstreamChanges = await rawDiff(git, c.base, c.upstream);
  const reverted: string[] = [];
  const reworked: string[] = [];
  let wholeFileOnly = 0;
  const lineChecked: string[] = [];
  for (const [path, [status]] of forkChanges) {
    const now = differs.get(path);
    if (!now) continue;
    const [nowStatus, nowBlob] = now;
    if (status === 'A' && nowStatus === 'D') reverted.push(`${path}: the fork's file is gone`);
    else if (status === 'D') {
      // The fork deleted it; it is back. Upstream's own new version of it is upstream's work.
      const back = upstreamChanges.get(path);
      if (!back) reverted.push(`${path}: the fork deleted it, and it is back`);
      else reworked.push(path);
    } else if (nowStatus === 'D') {
      // Gone in the result: upstream deleted it too (a move, perhaps), or the agent did.
      if (upstreamChanges.get(path)?.[0] === 'D') reworked.push(path);
      else reverted.push(`${path}: the fork changed it, and it is gone`);
    } else {
      const up = upstreamChanges.get(path);
      if (up && up[1] === nowBlob && status !== 'A')
        reverted.push(`${path}: upstream's version replaced the fork's change`);
      else lineChecked.push(path);
    }
  }
  if (lineChecked.length) {
    const checked = lineChecked.slice(0, MAX_LINE_CHECKED_FILES);
    wholeFileOnly += lineChecked.length - checked.length;
    reworked.push(...lineChecked.slice(MAX_LINE_CHECKED_FILES));
    const hunks = parseHunks(
      await git([
        'diff',
        '-U0',
        '--no-renames',
        '--no-color',
        '--no-ext-diff',
        c.base,
        c.fork,
        '--',
        ...checked.map((p) => `:(literal)${p}`),
      ]),
    );
    for (const path of checked) {
      const fileHunks = hunks.get(path);
      const size = Number((await git(['cat-file', '-s', `${c.merged}:${path}`])).trim());
      if (!fileHunks || size > MAX_BLOB) {
        // Binary or too large: the whole file differs from the fork's, so it was changed.
        wholeFileOnly++;
        reworked.push(path);
        continue;
      }
      const text = await git(['cat-file', 'blob', `${c.merged}:${path}`]);
      const lines = text.split('\n');
      const lineTokens = lines.map(tokens);
      let lost = 0;
      for (const h of fileHunks) {
        const has = (block: string[]) => text.includes(`${block.join('\n')}\n`);
        if (h.removed.length) {
          // A change of lines: undone when the lines it replaced are back and it is not there.
          // (A deletion of a few words only proves nothing: such lines are everywhere.)
          const words = h.removed.reduce((n, l) => n + tokens(l).size, 0);
          if (words >= 3 && has(h.removed) && !(h.added.length && has(h.added))) lost++;
        } else {
          // An addition: undone when most of its lines are gone, even reworded.
          const added = h.added.filter((l) => tokens(l).size);
          const kept = added.filter((l) => survives(l, lineTokens)).length;
          if (added.length && kept * 2 < added.length) lost++;
        }
      }
      if (lost)
        reverted.push(
          `${path}: ${lost} of the fork's ${fileHunks.length} change${fileHunks.length === 1 ? '' : 's'} undone`,
        );
      else reworked.push(path);
    }
  }
  return { reverted, reworked, checked: forkChanges.size, wholeFileOnly };
}
