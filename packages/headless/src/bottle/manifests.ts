import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { homeLayout, NAME_PATTERN, NAME_RULE } from '@bb/names';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { providerNames } from '../providers';

/** Agent and bottle names, as labels name them. */
export const MANIFEST_NAME = NAME_PATTERN;
const name = z.string().regex(MANIFEST_NAME, `must match ${NAME_RULE}`);

/** An agent: which CLI runs, as whom it commits, which bottle it uses by default. */
export const AgentManifestSchema = z
  .object({
    // Any registered provider (claude, codex, pi and script come built in).
    provider: z.string().superRefine((name, ctx) => {
      if (!providerNames().includes(name))
        ctx.addIssue({ code: 'custom', message: `must be one of ${providerNames().join(', ')}` });
    }),
    model: z.string().min(1).optional(),
    bottles: z.array(name).min(1, 'name at least one bottle').default(['default']),
    promptOverlay: z.string().optional(),
    /** How often the CLI may retry a failed model request before the turn fails. @default 2 */
    retries: z.number().int().min(0).max(10).optional(),
    git: z
      .object({
        name: z.string().min(1, 'must not be empty'),
        email: z.email('must be an email address'),
      })
      .strict(),
    /** For the script provider: its turns (see the script agent). */
    script: z.unknown().optional(),
    /**
     * How long one agent session may grow: after `maxTurns` turns, or once a turn's
     * model read `maxTokens` input tokens (where the CLI reports usage), the next
     * turn starts a fresh session seeded with a summary of the work so far.
     */
    /**
     * What this agent may spend (over the orchestrator's defaults): minutes a turn,
     * tokens and estimated US dollars a turn and over an issue. Reaching one stops
     * the turn, freezes it with its session, and asks the thread.
     */
    budget: z
      .object({
        turnMinutes: z
          .number()
          .positive()
          .max(7 * 24 * 60)
          .optional(),
        turnTokens: z.number().int().min(1000, 'must be at least 1000').optional(),
        turnUsd: z.number().positive().optional(),
        issueTokens: z.number().int().min(1000, 'must be at least 1000').optional(),
        issueUsd: z.number().positive().optional(),
      })
      .strict()
      .optional(),
    session: z
      .object({
        maxTurns: z.number().int().min(1, 'must be at least 1').max(10_000).optional(),
        maxTokens: z.number().int().min(1000, 'must be at least 1000').optional(),
      })
      .strict()
      .optional(),
  })
  .strict();
export type AgentManifest = z.infer<typeof AgentManifestSchema>;

/** A secret is only ever named: `env:NAME` (the proxy's environment) or `file:/abs/path`. */
const secretRef = z
  .string()
  .regex(
    /^(env:[A-Z_][A-Z0-9_]*|file:\/\S+)$/,
    'must reference a secret as env:NAME or file:/path, never hold it',
  );

const memory = z.union([
  z.number().int().positive(),
  z.string().regex(/^\d+(\.\d+)?[kmg]$/i, 'must be bytes or a size like 512m or 2g'),
]);

/** A bottle: its image, what it may reach, which credentials are injected for it, its limits. */
export const BottleManifestSchema = z
  .object({
    image: z.string().min(1).optional(),
    dockerfile: z.string().min(1).optional(),
    egress: z
      .object({
        allow: z
          .array(
            z
              .string()
              .regex(
                /^((\*\.)?[a-z0-9.-]+|\[[0-9a-f:.]+\])(:\d{1,5})?$/i,
                'must be a host, *.suffix, an IP or [ipv6], optionally :port',
              ),
          )
          .default([]),
      })
      .strict()
      .default({ allow: [] }),
    credentials: z
      .array(
        z
          .object({
            route: z.string().regex(/^\/[a-z0-9._-]+$/, 'must be a path prefix such as /anthropic'),
            upstream: z.url('must be the upstream base URL'),
            headers: z.record(z.string(), secretRef),
          })
          .strict(),
      )
      .default([]),
    resources: z
      .object({
        memory: memory.optional(),
        pids: z.number().int().min(16).max(65_536).optional(),
        cpus: z.number().positive().max(64).optional(),
        /** The agent's own disk (workspace and home): a size, or `off`. @default BB_BOTTLE_DISK or 10g */
        disk: z.union([memory, z.literal('off')]).optional(),
      })
      .strict()
      .default({}),
    env: z
      .record(
        z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name'),
        z.string(),
      )
      .default({}),
  })
  .strict()
  .refine((b) => (b.image ? 1 : 0) + (b.dockerfile ? 1 : 0) === 1, {
    message: 'give exactly one of image or dockerfile',
    path: ['image'],
  });
export type BottleManifest = z.infer<typeof BottleManifestSchema>;

/** `$BB_HOME/config`, with `BB_HOME` defaulting to `~/.bot-bottle`. */
export function configDir(env: Record<string, string | undefined> = process.env): string {
  return homeLayout(env).config;
}

export { memoryBytes } from '../engine/size';

function load<T>(
  kind: 'agents' | 'bottles',
  manifestName: string,
  schema: z.ZodType<T>,
  env: Record<string, string | undefined>,
): { manifest: T; file: string } {
  const what = kind === 'agents' ? 'agent' : 'bottle';
  if (!MANIFEST_NAME.test(manifestName)) {
    throw new BbError(
      'INVALID_INPUT',
      `${what} name ${JSON.stringify(manifestName)} is not valid: names match ${NAME_RULE}`,
    );
  }
  const dir = join(configDir(env), kind);
  const file = ['json', 'yaml', 'yml']
    .map((ext) => join(dir, `${manifestName}.${ext}`))
    .find((f) => existsSync(f));
  if (!file) {
    throw new BbError(
      'NOT_FOUND',
      `no ${what} named ${manifestName}: create ${join(dir, `${manifestName}.json`)} (see docs/manifests.md for the fields)`,
      {
        data: { kind: what, name: manifestName, dir },
      },
    );
  }
  let raw: unknown;
  try {
    const text = readFileSync(file, 'utf8');
    raw = file.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `${file} cannot be read as ${file.endsWith('.json') ? 'JSON' : 'YAML'}: ${(err as Error).message}`,
      { data: { file } },
    );
  }
  const result = schema.safeParse(raw);
  if (!result.success) {
    const lines = result.error.issues.map(
      (i) => `- ${i.path.length ? i.path.join('.') : '(file)'}: ${i.message}`,
    );
    throw new BbError(
      'INVALID_INPUT',
      `${file} is not a valid ${what} manifest:\n${lines.join('\n')}`,
      {
        data: { file, fields: result.error.issues.map((i) => i.path.join('.')) },
      },
    );
  }
  return { manifest: result.data, file };
}

/** Read and check `$BB_HOME/config/agents/<name>.{json,yaml,yml}`. */
export function loadAgentManifest(
  agent: string,
  env: Record<string, string | undefined> = process.env,
) {
  return load('agents', agent, AgentManifestSchema, env);
}

/** Read and check `$BB_HOME/config/bottles/<name>.{json,yaml,yml}`. */
export function loadBottleManifest(
  bottle: string,
  env: Record<string, string | undefined> = process.env,
) {
  return load('bottles', bottle, BottleManifestSchema, env);
}
