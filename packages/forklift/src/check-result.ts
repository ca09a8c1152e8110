/**
 * The host's checks of an agent's merge, all read as data in forklift's repository:
 * both sides' commits reachable, CI and protected files no one's but the two sides',
 * and the fork's own changes not undone. (The fork's tests come after, on the host.)
 */
import { errorMessage } from '@bb/errors';
import { checkForkWork, type ForkWorkCheck } from './fork-work';
import { checkTree, type TreeCheck } from './verify';
import { short } from './verify-repo';

export interface ResultFound {
  beyondMerge: string[];
  forkWork: { checked: number; reverted: string[]; reworked: string[] };
}

export type ResultCheck =
  | { failure: string; found?: ResultFound }
  | { check: TreeCheck; work: ForkWorkCheck; found: ResultFound };

export async function checkAgentResult(o: {
  git: (args: string[]) => Promise<string>;
  verify: string;
  branch: string;
  fork: string;
  upstream: string;
  merged: string;
  protect: string[];
  /** What the agent's CLI said of its run, for the message (` (the agent said: …)`). */
  said: string;
}): Promise<ResultCheck> {
  const ancestor = (a: string, b: string) =>
    o.git(['merge-base', '--is-ancestor', a, b]).then(
      () => true,
      () => false,
    );
  if (!(await ancestor(o.upstream, o.merged)))
    return {
      failure: `upstream ${o.branch} (${short(o.upstream)}) is not in the agent's ${o.branch} (${short(o.merged)}): it did not merge${o.said}`,
    };
  if (!(await ancestor(o.fork, o.merged)))
    return {
      failure: `the fork's ${o.branch} (${short(o.fork)}) is not in the agent's ${o.branch} (${short(o.merged)}): fork commits would be lost`,
    };
  let check: TreeCheck;
  let work: ForkWorkCheck;
  try {
    check = await checkTree(o.verify, o, o.protect);
    const base = (await o.git(['merge-base', o.fork, o.upstream])).trim();
    work = await checkForkWork(o.git, {
      base,
      fork: o.fork,
      upstream: o.upstream,
      merged: o.merged,
    });
  } catch (err) {
    return { failure: `the agent's result could not be checked: ${errorMessage(err)}` };
  }
  const found: ResultFound = {
    beyondMerge: check.beyond,
    forkWork: { checked: work.checked, reverted: work.reverted, reworked: work.reworked },
  };
  if (check.violations.length)
    return {
      failure: `the agent wrote CI or protected files (${check.violations.join(', ')}): in a result forklift pushes, those are the fork's, upstream's or the automatic merge's`,
      found,
    };
  if (work.reverted.length)
    return {
      failure: `the agent's result undoes the fork's own work (${work.reverted.slice(0, 5).join('; ')}${work.reverted.length > 5 ? `; and ${work.reverted.length - 5} more` : ''})`,
      found,
    };
  return { check, work, found };
}
