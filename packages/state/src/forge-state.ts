import { BbError } from '@bb/errors';
import { NAME_PATTERN, NAME_RULE } from '@bb/names';
import { z } from 'zod';

/** A name a forge accepts for an owner or a repository. */
const FORGE_NAME = /^[A-Za-z0-9_.-]+$/;
const forgeName = z
  .string()
  .min(1, 'must not be empty')
  .max(100)
  .regex(FORGE_NAME, 'may contain only letters, digits, "_", "." and "-"');

const isoTime = z.iso.datetime({ offset: true });

/** Where a bottle is in its life. */
export const ForgeStatusSchema = z.enum(['running', 'frozen', 'destroyed']);
export type ForgeStatus = z.infer<typeof ForgeStatusSchema>;

/** The key of a forge state row: one issue of one repository. */
export const ForgeStateKeySchema = z.object({
  owner: forgeName,
  repo: forgeName,
  issueNumber: z.number().int().positive().max(2_147_483_647),
});
export type ForgeStateKey = z.infer<typeof ForgeStateKeySchema>;

/** One forge-managed bottle: which issue it serves, which agent runs in it, and where it is. */
export const ForgeStateSchema = ForgeStateKeySchema.extend({
  slug: z.string().regex(NAME_PATTERN, `must match ${NAME_RULE}`),
  agentName: z.string().min(1).max(63),
  bottleNames: z.array(z.string().min(1).max(63)),
  backendName: z.string().min(1).max(63),
  agentGitUser: z.string().min(1).max(255),
  prNumber: z.number().int().positive().nullable(),
  status: ForgeStatusSchema,
  lastCheckinAt: isoTime,
  /** The agent's conversation id, recorded so a resume continues that conversation. */
  sessionId: z.string().min(1).nullable(),
  /** The working directory the agent's session was pinned to. */
  cwd: z.string().min(1).nullable(),
  createdAt: isoTime,
  updatedAt: isoTime,
});
export type ForgeState = z.infer<typeof ForgeStateSchema>;

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;
const SLUG = NAME_PATTERN;
const STRICT_ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?(Z|[+-]\d{2}:\d{2})$/;
const STATUS = new Set(['running', 'frozen', 'destroyed']);
const shortName = (v: unknown) => typeof v === 'string' && v.length >= 1 && v.length <= 63;
const optText = (v: unknown) => v === null || (typeof v === 'string' && v.length > 0);
const isoOk = (v: unknown) =>
  typeof v === 'string' && STRICT_ISO.test(v) && !Number.isNaN(Date.parse(v));

/**
 * A hand-written check that accepts a strict subset of what ForgeStateSchema
 * accepts, for the write path's speed. Whenever it declines, zod decides.
 */
function fastForgeState(v: unknown): ForgeState | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const s = v as Record<string, unknown>;
  const keys = Object.keys(s);
  if (keys.length !== 15) return undefined;
  const n = s['issueNumber'];
  const pr = s['prNumber'];
  const names = s['bottleNames'];
  const ok =
    typeof s['owner'] === 'string' &&
    NAME.test(s['owner']) &&
    typeof s['repo'] === 'string' &&
    NAME.test(s['repo']) &&
    Number.isSafeInteger(n) &&
    (n as number) > 0 &&
    (n as number) <= 2_147_483_647 &&
    typeof s['slug'] === 'string' &&
    SLUG.test(s['slug']) &&
    shortName(s['agentName']) &&
    Array.isArray(names) &&
    names.every(shortName) &&
    shortName(s['backendName']) &&
    typeof s['agentGitUser'] === 'string' &&
    s['agentGitUser'].length >= 1 &&
    s['agentGitUser'].length <= 255 &&
    (pr === null || (Number.isSafeInteger(pr) && (pr as number) > 0)) &&
    typeof s['status'] === 'string' &&
    STATUS.has(s['status']) &&
    isoOk(s['lastCheckinAt']) &&
    optText(s['sessionId']) &&
    optText(s['cwd']) &&
    isoOk(s['createdAt']) &&
    isoOk(s['updatedAt']);
  if (!ok) return undefined;
  return {
    owner: s['owner'] as string,
    repo: s['repo'] as string,
    issueNumber: n as number,
    slug: s['slug'] as string,
    agentName: s['agentName'] as string,
    bottleNames: [...(names as string[])],
    backendName: s['backendName'] as string,
    agentGitUser: s['agentGitUser'] as string,
    prNumber: pr as number | null,
    status: s['status'] as ForgeState['status'],
    lastCheckinAt: s['lastCheckinAt'] as string,
    sessionId: s['sessionId'] as string | null,
    cwd: s['cwd'] as string | null,
    createdAt: s['createdAt'] as string,
    updatedAt: s['updatedAt'] as string,
  };
}

/** Validate a value as a ForgeState, or throw INVALID_INPUT naming each bad field. */
export function parseForgeState(value: unknown): ForgeState {
  const fast = fastForgeState(value);
  if (fast) return fast;
  const result = ForgeStateSchema.safeParse(value);
  if (!result.success) throw invalid('forge state', result.error);
  return result.data;
}

/** Validate a state key, or throw INVALID_INPUT. */
export function parseForgeStateKey(
  owner: unknown,
  repo: unknown,
  issueNumber: unknown,
): ForgeStateKey {
  // What the schema says, checked by hand for a key that is valid (every event's read
  // asks): the schema runs only to say what is wrong with one that is not.
  const name = (v: unknown): v is string =>
    typeof v === 'string' && v.length > 0 && v.length <= 100 && FORGE_NAME.test(v);
  if (
    name(owner) &&
    name(repo) &&
    typeof issueNumber === 'number' &&
    Number.isInteger(issueNumber) &&
    issueNumber > 0 &&
    issueNumber <= 2_147_483_647
  )
    return { owner, repo, issueNumber };
  const result = ForgeStateKeySchema.safeParse({ owner, repo, issueNumber });
  if (!result.success) throw invalid('forge state key', result.error);
  return result.data;
}

function invalid(what: string, error: z.ZodError): BbError {
  const fields = error.issues.map((i) => `${i.path.join('.') || '(value)'}: ${i.message}`);
  return new BbError('INVALID_INPUT', `invalid ${what}: ${fields.join('; ')}`, {
    data: { issues: error.issues.map((i) => ({ path: i.path.map(String), message: i.message })) },
  });
}
