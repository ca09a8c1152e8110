import { BbError } from '@bb/errors';
import { z } from 'zod';

/** `30m`, `90s`, `2h`, `1500ms` or a number of milliseconds. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  return Math.round(
    n * ({ ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const)[(m[2] ?? 'ms') as 'ms'],
  );
}

const duration = (name: string, fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((v, ctx) => {
      const ms = parseDuration(v);
      if (ms === undefined || ms <= 0) {
        ctx.addIssue({
          code: 'custom',
          message: `${name} must be a duration such as 30m, 90s or 1500ms (got ${JSON.stringify(v)})`,
        });
        return z.NEVER;
      }
      return ms;
    });

export const ConfigSchema = z.object({
  BB_HOME: z.string().optional(),
  FORGE_ORG: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,100}$/, 'FORGE_ORG must be an organisation name')
    .default('bot-bottle'),
  FORGE_GITEA_API: z.url({
    error: 'FORGE_GITEA_API must be the Gitea API URL, e.g. https://gitea.example.com/api/v1',
  }),
  FORGE_TOKEN: z
    .string({ error: 'FORGE_TOKEN is required (a token of the bot user, a member of FORGE_ORG)' })
    .min(1, 'FORGE_TOKEN is required'),
  FORGE_WEBHOOK_SECRET: z
    .string({ error: 'FORGE_WEBHOOK_SECRET is required (the secret set on the Gitea webhook)' })
    .min(8, 'FORGE_WEBHOOK_SECRET must be at least 8 characters'),
  FORGE_WATCHDOG_TIMEOUT: duration('FORGE_WATCHDOG_TIMEOUT', '30m'),
  BB_PORT: z
    .string()
    .default('8080')
    .refine(
      (v) => /^\d{1,5}$/.test(v) && Number(v) < 65536,
      'BB_PORT must be a port number (1-65535, or 0 for any free port)',
    )
    .transform(Number),
  BB_HOST: z.string().default('127.0.0.1'),
  /**
   * The operator token the dashboard and the APIs require (the webhook never
   * does). Without it they answer only on a loopback listener.
   */
  BB_API_TOKEN: z
    .string()
    .min(16, 'BB_API_TOKEN must be at least 16 characters (e.g. openssl rand -hex 24)')
    .optional(),
  /** How often to sweep the forge's REST API for missed deliveries; `0` turns it off. */
  BB_SWEEP_INTERVAL: z
    .string()
    .default('5m')
    .transform((v, ctx) => {
      if (v.trim() === '0') return 0;
      const ms = parseDuration(v);
      if (ms === undefined || ms <= 0) {
        ctx.addIssue({
          code: 'custom',
          message: `BB_SWEEP_INTERVAL must be a duration such as 5m or 30s, or 0 to turn the sweep off (got ${JSON.stringify(v)})`,
        });
        return z.NEVER;
      }
      return ms;
    }),
  FORGE_WATCHDOG_INTERVAL: duration('FORGE_WATCHDOG_INTERVAL', '60s'),
  /** Repositories the sweep looks at besides those that have bottles: `owner/repo,owner/repo`. */
  FORGE_REPOS: z
    .string()
    .default('')
    .transform((v, ctx) => {
      const out: Array<{ owner: string; repo: string }> = [];
      for (const part of v
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean)) {
        const m = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)$/.exec(part);
        if (!m) {
          ctx.addIssue({
            code: 'custom',
            message: `FORGE_REPOS must be a comma-separated list of owner/repo (got ${JSON.stringify(part)})`,
          });
          return z.NEVER;
        }
        out.push({ owner: m[1]!, repo: m[2]! });
      }
      return out;
    }),
  /** `docker` (default) or `local` (no isolation; development only). */
  BB_BACKEND: z
    .enum(['docker', 'local'], {
      error: 'BB_BACKEND must be docker or local',
    })
    .default('docker'),
  BB_CONCURRENCY: z
    .string()
    .default('4')
    .refine((v) => /^[1-9]\d{0,2}$/.test(v), 'BB_CONCURRENCY must be a whole number from 1 to 999')
    .transform(Number),
});
export type OrchestratorConfig = z.infer<typeof ConfigSchema>;

/** Read the orchestrator's configuration; one line per bad value, secrets never echoed. */
export function loadConfig(env: Record<string, string | undefined>): OrchestratorConfig {
  const r = ConfigSchema.safeParse(env);
  if (r.success) return r.data;
  throw new BbError(
    'INVALID_INPUT',
    `the orchestrator's configuration is invalid:\n${[...new Set(r.error.issues.map((i) => `- ${i.message}`))].join('\n')}`,
  );
}
