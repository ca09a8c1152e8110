/**
 * Partial sync: when the whole upstream range cannot be merged (a conflict the agent
 * cannot resolve, red tests, the time cap), the furthest upstream commit that the host
 * can merge on its own is found, cheapest checks first: a bisection of upstream's
 * first-parent history by clean merges (no container), then a few runs of the fork's
 * tests to step back from a prefix they fail on. A fork that cannot take the whole
 * range at once moves forward anyway, and the PR says what blocks the rest.
 */

export interface Prefix {
  /** The upstream commit merged up to. */
  commit: string;
  /** The merge proposed. */
  merged: string;
  /** How many of upstream's first-parent commits that is, of `total`. */
  taken: number;
  total: number;
  /** The first upstream commit not taken, and its subject line (upstream's words). */
  blocker: { commit: string; subject: string };
}

export interface PrefixInput {
  /** git in forklift's own repository. */
  git: (args: string[]) => Promise<string>;
  fork: string;
  upstream: string;
  /** A clean merge of `fork` and `commit`, as a commit of forklift's, or undefined on a conflict. */
  mergeClean: (commit: string) => Promise<string | undefined>;
  /** The fork's tests on a commit (undefined when the fork declares none). */
  tests?: ((commit: string) => Promise<boolean>) | undefined;
  /** The most test runs spent stepping back. @default 3 */
  maxTestRuns?: number;
  say?: (line: string) => void;
}

/** The furthest mergeable prefix of upstream, or undefined when not one commit of it merges. */
export async function findMergeablePrefix(o: PrefixInput): Promise<Prefix | undefined> {
  const base = (await o.git(['merge-base', o.fork, o.upstream])).trim();
  const chain = (await o.git(['rev-list', '--first-parent', '--reverse', `${base}..${o.upstream}`]))
    .split('\n')
    .filter(Boolean);
  // The whole range is what failed: only a proper prefix is worth proposing.
  const candidates = chain.slice(0, -1);
  if (!candidates.length) return undefined;
  const merges = new Map<number, string | undefined>();
  const mergeAt = async (i: number) => {
    if (!merges.has(i)) merges.set(i, await o.mergeClean(candidates[i]!));
    return merges.get(i);
  };
  // The largest i whose merge is clean, by bisection (conflicts mostly grow with the range).
  let lo = -1;
  let hi = candidates.length;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (await mergeAt(mid)) lo = mid;
    else hi = mid;
  }
  o.say?.(`partial sync: ${lo + 1} of ${chain.length} upstream commits merge cleanly`);
  if (lo < 0) return undefined;
  // Green tests next: the clean prefix, then halves of it, a few runs at most.
  if (o.tests) {
    let good = -1;
    let probe = lo;
    for (let runs = o.maxTestRuns ?? 3; runs > 0 && probe >= 0; runs--) {
      const merged = await mergeAt(probe);
      if (merged && (await o.tests(merged))) {
        good = probe;
        break;
      }
      probe = probe === 0 ? -1 : probe >> 1;
    }
    if (good < 0) return undefined;
    lo = good;
  }
  const next = chain[lo + 1]!;
  const subject = (await o.git(['log', '-1', '--format=%s', next])).trim().slice(0, 200);
  return {
    commit: candidates[lo]!,
    merged: (await mergeAt(lo))!,
    taken: lo + 1,
    total: chain.length,
    blocker: { commit: next, subject },
  };
}
