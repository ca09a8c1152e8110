import { AGENT_LABEL_PREFIX, BOTTLE_LABEL_PREFIX, NAME_PATTERN } from '@bb/names';

/** The issue labels and the name rule, from `@bb/names`. */
export { AGENT_LABEL_PREFIX, BOTTLE_LABEL_PREFIX, NAME_PATTERN };

export interface TargetingInput {
  labels: readonly string[];
  assignees: readonly string[];
}

export interface TargetingOptions {
  /** The org whose members' assignment launches agents. @default 'bot-bottle' */
  org?: string;
  /**
   * Answers whether `user` is a member of `org`. `undefined` (or a throw) means
   * "cannot tell", which never counts as membership.
   */
  isMember: (org: string, user: string) => Promise<boolean | undefined>;
}

export interface TargetingResult {
  targeted: boolean;
  /** The agent named by the issue's `bot-bottle:` label, when exactly one valid one exists. */
  agent: string | undefined;
  /** The bottle named by a `bot-bottle-bottle:` label, when exactly one valid one exists. */
  bottle: string | undefined;
  /** The assignee who is an org member (the bot the agent acts as). */
  assignee: string | undefined;
  /** Why the issue is or is not targeted, one sentence each, for the log. */
  reasons: string[];
}

/** Is `name` a valid agent or bottle name? Returns the problem, or undefined. */
export function checkName(name: string): string | undefined {
  if (name.length === 0) return 'the name is empty';
  if (name !== name.normalize('NFKC') || /[^\x20-\x7e]/.test(name)) {
    return 'the name contains non-ASCII characters (look-alikes are not accepted)';
  }
  if (name.includes('/') || name.includes('\\') || name.includes('..'))
    return 'the name contains a path';
  if (!NAME_PATTERN.test(name)) return `the name must match ${NAME_PATTERN.source}`;
  return undefined;
}

// A label that reads like ours once look-alike characters are folded.
function looksLikePrefix(label: string, prefix: string): boolean {
  const folded = label
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[\u2010-\u2015\u2212\ufe58\ufe63\uff0d]/g, '-')
    .replace(/[\uff1a\ua789\u02d0]/g, ':');
  return !label.startsWith(prefix) && folded.startsWith(prefix);
}

/**
 * Decide whether an issue launches an agent: at least one assignee is a member of
 * the org, and exactly one label `bot-bottle:<agent>` names a valid agent. An
 * optional single `bot-bottle-bottle:<name>` picks the bottle. Pure but for the
 * membership lookups it makes (only when the labels already qualify).
 */
export async function evaluateTargeting(
  issue: TargetingInput,
  options: TargetingOptions,
): Promise<TargetingResult> {
  const org = options.org ?? 'bot-bottle';
  const reasons: string[] = [];
  const agents: string[] = [];
  const bottles: string[] = [];
  let invalid = false;

  /** A label of `prefix`: its name into `into`, or why it is refused. */
  const take = (label: string, prefix: string, into: string[]) => {
    const name = label.slice(prefix.length);
    const problem = checkName(name);
    if (problem) {
      reasons.push(`label ${JSON.stringify(label)} rejected: ${problem}`);
      invalid = true;
    } else into.push(name);
  };
  for (const label of issue.labels) {
    if (label.startsWith(BOTTLE_LABEL_PREFIX)) take(label, BOTTLE_LABEL_PREFIX, bottles);
    else if (label.startsWith(AGENT_LABEL_PREFIX)) take(label, AGENT_LABEL_PREFIX, agents);
    else if (
      looksLikePrefix(label, AGENT_LABEL_PREFIX) ||
      looksLikePrefix(label, BOTTLE_LABEL_PREFIX)
    ) {
      reasons.push(
        `label ${JSON.stringify(label)} looks like a bot-bottle label but uses look-alike characters; ignored`,
      );
      invalid = true;
    }
  }

  const result = (targeted: boolean, assignee?: string): TargetingResult => ({
    targeted,
    agent: agents.length === 1 ? agents[0] : undefined,
    bottle: bottles.length === 1 ? bottles[0] : undefined,
    assignee,
    reasons,
  });

  if (agents.length === 0) {
    reasons.push(`no valid ${AGENT_LABEL_PREFIX}<agent> label`);
    return result(false);
  }
  if (agents.length > 1) {
    reasons.push(`several agent labels (${agents.join(', ')}): exactly one is needed`);
    return result(false);
  }
  if (bottles.length > 1) {
    reasons.push(`several bottle labels (${bottles.join(', ')}): at most one is allowed`);
    return result(false);
  }
  if (invalid) {
    reasons.push('an invalid bot-bottle label is present: fix or remove it');
    return result(false);
  }
  if (issue.assignees.length === 0) {
    reasons.push(`no assignee: assign the issue to a member of ${org}`);
    return result(false);
  }
  for (const user of issue.assignees) {
    let member: boolean | undefined;
    try {
      member = await options.isMember(org, user);
    } catch (err) {
      reasons.push(
        `could not tell whether ${user} is a member of ${org}: ${(err as Error).message}`,
      );
      continue;
    }
    if (member === true) {
      reasons.push(
        `assignee ${user} is a member of ${org}; agent ${agents[0]}${bottles[0] ? `, bottle ${bottles[0]}` : ''}`,
      );
      return result(true, user);
    }
    reasons.push(
      member === false
        ? `assignee ${user} is not a member of ${org}`
        : `could not tell whether ${user} is a member of ${org}`,
    );
  }
  return result(false);
}
