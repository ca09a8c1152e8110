import { defaultBottleBranches, type ForgeEvent, type ForgeKind } from '@bb/forge';

/** The key of an issue's queue: `owner/repo#n`. */
export const issueKey = (owner: string, repo: string, issue: number) => `${owner}/${repo}#${issue}`;

export function parseIssueKey(key: string): { owner: string; repo: string; issue: number } {
  const m = /^([^/]+)\/([^#]+)#(\d+)$/.exec(key);
  if (!m) throw new Error(`not an issue key: ${key}`);
  return { owner: m[1]!, repo: m[2]!, issue: Number(m[3]) };
}

/** The PR an event is about, when it is about one. */
export function prOf(event: ForgeEvent): number | undefined {
  switch (event.kind) {
    case 'comment_created':
      return event.on === 'pr' ? event.number : undefined;
    case 'issue_targeting_changed':
    case 'issue_closed':
      return undefined;
    default:
      return event.pr.number;
  }
}

/**
 * The issue an event belongs to, in constant time whatever the history: its
 * own number, the bottle branch's issue (the kind's convention), or the live
 * bottle that owns the PR (an indexed lookup). `undefined` when nothing claims
 * the PR yet: the caller parks the event until a bottle learns that PR.
 */
export async function issueOf(
  event: ForgeEvent,
  lookupPr: (
    owner: string,
    repo: string,
    pr: number,
  ) => number | undefined | Promise<number | undefined>,
  /** The forge kind's bottle branch convention. @default `bb/<agent>-<issue>` */
  branches: Pick<ForgeKind, 'issueOfBranch'> = defaultBottleBranches,
): Promise<number | undefined> {
  switch (event.kind) {
    case 'issue_targeting_changed':
    case 'issue_closed':
      return event.issue.number;
    case 'comment_created':
      return event.on === 'issue' ? event.number : lookupPr(event.owner, event.repo, event.number);
    default: {
      return (
        branches.issueOfBranch(event.pr.head) ?? lookupPr(event.owner, event.repo, event.pr.number)
      );
    }
  }
}
