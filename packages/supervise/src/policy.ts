import { existsSync, readFileSync } from 'node:fs';
import { BbError } from '@bb/errors';
import { homeLayout } from '@bb/names';
import { z } from 'zod';

/**
 * The operator's ceiling (`$BB_HOME/config/supervise.json`): what no approval
 * may exceed without an explicit override, and how requests behave. Every field
 * has a safe default, so the file is optional.
 */
export const PolicySchema = z
  .object({
    /** Base images a proposed Dockerfile may start `FROM` (besides the bottle's own image). */
    baseImages: z.array(z.string().min(1)).default([]),
    /**
     * Host patterns (`host`, `*.suffix`, with an optional `:port`) an allowlist may
     * open. Empty: no host beyond the bottle's current allowlist without an override.
     */
    egressCeiling: z.array(z.string().min(1)).default([]),
    /**
     * Which upstream hosts each secret may be sent to (`{ "ANTHROPIC_API_KEY":
     * ["api.anthropic.com"] }`). A route that sends a secret anywhere else needs an
     * override; a secret not named here may go only where it already goes.
     */
    credentialHosts: z.record(z.string(), z.array(z.string().min(1))).default({}),
    /**
     * What an approved Dockerfile's `RUN` steps may reach while the image builds, besides
     * the bottle's own allowlist: package registries, as allowlist entries, through the
     * build's egress proxy only. Empty: the steps reach only what the bottle may.
     * @default Debian's and npm's registries
     */
    buildRegistries: z
      .array(z.string().min(1))
      .default(['deb.debian.org', 'security.debian.org', 'registry.npmjs.org']),
    /** How long a request waits for a decision before it expires. @default 24 h */
    ttlMs: z
      .number()
      .int()
      .positive()
      .default(24 * 3600_000),
    /** How long a tool call waits for a decision before answering `pending`. @default 45 s */
    waitMs: z.number().int().min(0).max(600_000).default(45_000),
    /** Rejections in a row (of one kind, one bottle) that put the agent on a cool-down. @default 3 */
    coolDownAfter: z.number().int().positive().default(3),
    /** How long the cool-down lasts. @default 10 min */
    coolDownMs: z
      .number()
      .int()
      .positive()
      .default(10 * 60_000),
  })
  .strict();
export type Policy = z.infer<typeof PolicySchema>;

export const defaultPolicy = (): Policy => PolicySchema.parse({});

export function policyPath(home: string): string {
  return homeLayout({}, home).supervisePolicy;
}

/** Read the operator's policy, or the defaults when there is none. Names the file and field on error. */
export function loadPolicy(home: string): Policy {
  const file = policyPath(home);
  if (!existsSync(file)) return defaultPolicy();
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new BbError('INVALID_INPUT', `${file} is not JSON: ${(err as Error).message}`);
  }
  const parsed = PolicySchema.safeParse(raw);
  if (!parsed.success)
    throw new BbError(
      'INVALID_INPUT',
      `${file} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`).join('; ')}; fix it or remove it for the defaults`,
    );
  return parsed.data;
}
