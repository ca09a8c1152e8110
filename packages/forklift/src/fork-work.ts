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

/** A line that is a comment (in the languages most forks are in): code commented out is code gone. */
const COMMENT = /^\s*(\/\/|#|\/\*|\*|--|;|<!--|%|rem\s)/i;

/** Whether some line of `lines` keeps at least half the words of `line`, and is not a comment of it. */
function survives(line: string, lines: string[], lineTokens: Array<Set<string>>): boolean {
  const want = tokens(line);
  if (!want.size) return true;
  const comment = COMMENT.test(line);
  return lineTokens.some((have, i) => {
    if (!comment && COMMENT.test(lines[i]!)) return false;
    let n = 0;
    for (const t of want) if (have.has(t)) n++;
    return n * 2 >= want.size;
  });
}

interface Hunk {
  removed: string[];
  added: string[];
}

/**
 * The hunks of one path's `git diff -U0`: its removed and added lines. Everything
 * before the first `@@` is the header (paths, modes); after it, every line is content.
 * None for a binary file.
 */
function parseHunks(diff: string): Hunk[] {
  const hunks: Hunk[] = [];
  let hunk: Hunk | undefined;
  for (const line of diff.split('\n')) {
    if (line.startsWith('@@')) {
      hunk = { removed: [], added: [] };
      hunks.push(hunk);
    } else if (hunk && line.startsWith('+')) hunk.added.push(line.slice(1));
    else if (hunk && line.startsWith('-')) hunk.removed.push(line.slice(1));
  }
  return hunks;
}

/** `git diff --raw -z` between two commits: path → [status, new blob, old blob]. */
async function rawDiff(
  git: Git,
  a: string,
  b: string,
): Promise<Map<string, [string, string, string]>> {
  const out = new Map<string, [string, string, string]>();
  const parts = (await git(['diff', '--no-renames', '--raw', '--no-abbrev', '-z', a, b])).split(
    '\0',
  );
  for (let i = 0; i + 1 < parts.length; i += 2) {
    const meta = parts[i]!.split(' ');
    out.set(parts[i + 1]!, [meta[4]!.charAt(0), meta[3]!, meta[2]!]);
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
  // Where a fork's file went when it is gone from its path: the same bytes elsewhere is a move.
  let resultBlobs: Set<string> | undefined;
  const movedElsewhere = async (blob: string) => {
    resultBlobs ??= new Set(
      (await git(['ls-tree', '-r', '-z', c.merged]))
        .split('\0')
        .filter(Boolean)
        .map((e) => e.split('\t')[0]!.split(' ')[2]!),
    );
    return resultBlobs.has(blob);
  };
  for (const [path, [status, forkBlob, baseBlob]] of forkChanges) {
    const now = differs.get(path);
    if (!now) continue;
    const [nowStatus, nowBlob] = now;
    if (status === 'A' && nowStatus === 'D') {
      if (await movedElsewhere(forkBlob)) reworked.push(path);
      else reverted.push(`${path}: the fork's file is gone`);
    } else if (status === 'D') {
      // The fork deleted it; it is back: only upstream's own new version of it may be.
      const up = upstreamChanges.get(path);
      if (up && up[0] !== 'D' && up[1] === nowBlob) reworked.push(path);
      else reverted.push(`${path}: the fork deleted it, and it is back`);
    } else if (nowStatus === 'D') {
      // Gone in the result: upstream deleted it too (a move, perhaps), or the agent did.
      if (upstreamChanges.get(path)?.[0] === 'D') reworked.push(path);
      else reverted.push(`${path}: the fork changed it, and it is gone`);
    } else {
      const up = upstreamChanges.get(path);
      if (status === 'M' && nowBlob === baseBlob)
        reverted.push(`${path}: the fork's change is undone (the file is as before it)`);
      else if (up && up[1] === nowBlob && status !== 'A')
        reverted.push(`${path}: upstream's version replaced the fork's change`);
      else lineChecked.push(path);
    }
  }
  if (lineChecked.length) {
    const checked = lineChecked.slice(0, MAX_LINE_CHECKED_FILES);
    wholeFileOnly += lineChecked.length - checked.length;
    reworked.push(...lineChecked.slice(MAX_LINE_CHECKED_FILES));
    for (const path of checked) {
      // One path at a time: no header of one file can be read as another's.
      const fileHunks = parseHunks(
        await git([
          'diff',
          '-U0',
          '--no-renames',
          '--no-color',
          '--no-ext-diff',
          '--no-textconv',
          c.base,
          c.fork,
          '--',
          `:(literal)${path}`,
        ]),
      );
      const size = Number((await git(['cat-file', '-s', `${c.merged}:${path}`])).trim());
      if (!fileHunks.length || size > MAX_BLOB) {
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
        const words = h.removed.reduce((n, l) => n + tokens(l).size, 0);
        if (h.removed.length && h.added.length) {
          // A change of lines: undone when the lines it replaced are back and it is not there.
          if (words >= 1 && has(h.removed) && !has(h.added)) lost++;
        } else if (h.removed.length) {
          // A deletion: undone when the deleted lines are back (a few words prove nothing:
          // such lines are everywhere).
          if (words >= 3 && has(h.removed)) lost++;
        } else {
          // An addition: undone when a line of it is gone or commented out (a line keeping
          // half its words, reworded to fit upstream, is still there).
          const added = h.added.filter((l) => tokens(l).size >= 2);
          if (added.some((l) => !survives(l, lines, lineTokens))) lost++;
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
