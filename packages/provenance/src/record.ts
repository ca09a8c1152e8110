import { z } from 'zod';
import { UsageSchema } from './usage';

export const RECORD_VERSION = 1;

const Finding = z.object({
  rule: z.string(),
  commit: z.string(),
  file: z.string(),
  line: z.number().int(),
});

/** A run record: what ran, for which issue, how it ended, and what it did. */
export const RunRecordSchema = z.object({
  version: z.literal(RECORD_VERSION),
  id: z.string().min(1),
  slug: z.string().min(1),
  agent: z.string().min(1),
  provider: z.string().optional(),
  providerVersion: z.string().optional(),
  bottles: z.array(z.string()),
  forge: z
    .object({
      owner: z.string(),
      repo: z.string(),
      issue: z.number().int(),
      prs: z.array(z.number().int()),
    })
    .nullable(),
  turn: z.number().int().positive(),
  /**
   * This turn began a fresh agent session in place of a long one: why, and the
   * summary it was seeded with.
   */
  sessionRotated: z
    .object({ reason: z.string(), previousTurns: z.number().int(), summary: z.string() })
    .optional(),
  /**
   * What was taken out of the people's text this turn's prompt quotes, because its
   * readers could not see it (HTML comments, invisible characters...). Omitted when nothing was.
   */
  promptHidden: z
    .array(z.object({ from: z.string(), what: z.string(), count: z.number().int().positive() }))
    .optional(),
  startedAt: z.string(),
  finishedAt: z.string(),
  durationMs: z.number().int().nonnegative(),
  exitCode: z.number().int().nullable(),
  /** Why the agent's turn failed, as its CLI reported it (e.g. a model API error pi exits 0 on). */
  agentError: z.string().max(2000).optional(),
  done: z
    .object({ status: z.enum(['success', 'failure', 'blocked']), summary: z.string() })
    .nullable(),
  watchdogFired: z
    .object({
      reason: z.enum([
        'silence',
        'exit_without_signal',
        'sidecar_death',
        'vanished',
        'closed',
        'stopped',
        'wall_time',
        'budget',
        'loop',
      ]),
      detail: z.string(),
    })
    .nullable(),
  secretScan: z.object({
    tool: z.string(),
    scanned: z.string(),
    findings: z.array(Finding),
    error: z.string().optional(),
    /** The commits the scan started from (full ids), so the next turn scans only what is new. */
    covered: z.array(z.string()).optional(),
  }),
  /** Omitted when the bottle had no egress log. */
  egress: z.unknown().optional(),
  /**
   * The model tokens this turn used, as the credential proxy metered the
   * answers, and their estimated cost. Omitted when no answer was metered.
   */
  usage: UsageSchema.optional(),
  /**
   * What the agent asked the operator for in this turn (supervise requests), each
   * with the decision (who, when, scope, the final file's hash) and what the
   * remediation did. Omitted when it asked for nothing.
   */
  supervise: z
    .array(
      z.object({
        id: z.string(),
        kind: z.string(),
        tool: z.string(),
        createdAt: z.string(),
        justification: z.string(),
        candidateHash: z.string(),
        status: z.string(),
        decision: z
          .object({
            by: z.string(),
            /** Through what: forge, api, cli, tui, auto or system (records before it have none). */
            via: z.string().nullable().optional(),
            at: z.string(),
            scope: z.string().nullable(),
            finalHash: z.string().nullable(),
            reason: z.string().nullable(),
            override: z.boolean(),
          })
          .nullable(),
        remediation: z
          .object({ ok: z.boolean(), detail: z.string(), at: z.string().nullable() })
          .nullable(),
      }),
    )
    .optional(),
  opLog: z.object({
    verified: z.boolean(),
    /** The head this record verified the log up to; the next turn's log must run through it. */
    head: z.object({ hash: z.string(), seq: z.number().int().nonnegative() }).optional(),
    problems: z.array(z.object({ line: z.number().int(), problem: z.string() })),
    entries: z.array(z.record(z.string(), z.unknown())),
  }),
  bbVersion: z.string(),
  gitCommit: z.string().nullable(),
  /** The hash of this bottle's previous record (64 zeros for its first). */
  prev: z.string().regex(/^[0-9a-f]{64}$/),
});
export type RunRecord = z.infer<typeof RunRecordSchema>;

/** A record with its hash and signature. */
export interface SignedRecord {
  record: RunRecord;
  /** sha256 of the record's canonical JSON. */
  hash: string;
  /** ed25519 over the canonical JSON, base64. */
  signature: string;
  keyId: string;
}

export const GENESIS_HASH = '0'.repeat(64);
