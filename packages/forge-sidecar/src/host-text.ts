/**
 * What only bot-bottle's orchestrator writes on a thread, never an agent: a
 * supervise request's id and a `/bb` command. The agent writes as the same
 * forge user as the orchestrator; a comment of its own that named its request
 * (beside a harmless diff) could make a person approve a request they never
 * saw. Checked on the text as a person would read it: case, compatibility
 * forms and invisible characters do not hide it.
 */
export function hostOnlyText(text: string): string | undefined {
  const plain = text
    .normalize('NFKC')
    .replace(/[\p{Cf}\p{Mn}\p{Me}]/gu, '')
    .toLowerCase();
  if (/sr[\s\p{P}\p{S}]*[a-z0-9]{20}/u.test(plain)) return 'a supervise request id (sr_…)';
  if (/(^|\n)[\s>]*\/\s*bb\b/.test(plain)) return 'a /bb command';
  return undefined;
}
