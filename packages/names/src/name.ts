/**
 * The rule for every name bot-bottle takes from a person or makes itself: agent
 * and bottle manifest names, and bottle slugs. Lower case letters and digits
 * first, then those, dots, underscores and hyphens, 63 at most (a DNS label's
 * length, a container name's safe alphabet, and never a path step).
 */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** The rule in words, for messages: `names match …`. */
export const NAME_RULE = `^[a-z0-9][a-z0-9._-]{0,62}$`;

/** Whether `name` follows the rule. */
export function isName(name: string): boolean {
  return NAME_PATTERN.test(name);
}
