import { BbError, errorMessage } from '@bb/errors';
import { type ForgeKind, type ForgeKindRegistry, type ForgeSite, forgeKinds } from '@bb/forge';
import { parsePoolSizes } from '@bb/headless';
import { tokenAmount } from '@bb/lifecycle';
import { z } from 'zod';
import { backendKinds } from './backends';

/**
 * `30m`, `90s`, `2h`, `7d` or `1500ms`. The unit is required: a bare number is
 * `undefined` (is `1800` seconds or milliseconds? the caller says which it needs).
 */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  return Math.round(
    n * ({ ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const)[m[2] as 'ms'],
  );
}

/** The message for a duration that is not one, naming the value and the fix. */
export function durationProblem(name: string, value: string): string {
  return /^\s*\d+(\.\d+)?\s*$/.test(value)
    ? `${name} needs a unit: ${JSON.stringify(value)} could be seconds or milliseconds; write e.g. ${value.trim()}s or ${value.trim()}ms`
    : `${name} must be a duration such as 30m, 90s or 1500ms (got ${JSON.stringify(value)})`;
}

/** `on`/`off` (also true/false, yes/no, 1/0). */
const toggle = (name: string, fallback: 'on' | 'off') =>
  z
    .string()
    .default(fallback)
    .transform((v, ctx) => {
      const t = v.trim().toLowerCase();
      if (['on', 'true', 'yes', '1'].includes(t)) return true;
      if (['off', 'false', 'no', '0'].includes(t)) return false;
      ctx.addIssue({
        code: 'custom',
        message: `${name} must be on or off (got ${JSON.stringify(v)})`,
      });
      return z.NEVER;
    });

/** `16g`, `512m`, `1.5g` or a number of bytes. */
export function parseBytes(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)([kmgt])?$/i.exec(text.trim());
  if (!m) return undefined;
  const unit = (m[2] ?? '').toLowerCase();
  return Math.round(
    Number(m[1]) * 1024 ** ({ '': 0, k: 1, m: 2, g: 3, t: 4 } as const)[unit as ''],
  );
}

const count = (name: string, fallback: string, max: number) =>
  z
    .string()
    .default(fallback)
    .refine(
      (v) => /^[1-9]\d*$/.test(v) && Number(v) <= max,
      `${name} must be a whole number from 1 to ${max}`,
    )
    .transform(Number);

/** A comma-separated list of forge logins, or undefined when unset. */
const logins = (name: string) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return undefined;
      const list = v.split(',').map((l) => l.trim());
      const bad = list.find((l) => !/^[A-Za-z0-9_.[\]-]{1,100}$/.test(l));
      if (bad !== undefined) {
        ctx.addIssue({
          code: 'custom',
          message: `${name} must be a comma-separated list of forge logins (got ${JSON.stringify(bad)})`,
        });
        return z.NEVER;
      }
      return list;
    });

/** A token count such as 500000, 500k or 2m, or undefined when unset. */
const tokens = (name: string) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return undefined;
      const n = tokenAmount(v);
      if (n === undefined || n < 1000) {
        ctx.addIssue({
          code: 'custom',
          message: `${name} must be a number of tokens of at least 1000, such as 500000, 500k or 2m (got ${JSON.stringify(v)})`,
        });
        return z.NEVER;
      }
      return n;
    });

/** US dollars such as 5, 0.50 or $5, or undefined when unset. */
const dollars = (name: string) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return undefined;
      const m = /^\$?(\d+(?:\.\d+)?)$/.exec(v.trim());
      if (!m || !(Number(m[1]) > 0)) {
        ctx.addIssue({
          code: 'custom',
          message: `${name} must be an amount of US dollars above 0, such as 5 or 0.50 (got ${JSON.stringify(v)})`,
        });
        return z.NEVER;
      }
      return Number(m[1]);
    });

const duration = (name: string, fallback: string) =>
  z
    .string()
    .default(fallback)
    .transform((v, ctx) => {
      const ms = parseDuration(v);
      if (ms === undefined || ms <= 0) {
        ctx.addIssue({ code: 'custom', message: durationProblem(name, v) });
        return z.NEVER;
      }
      return ms;
    });

export const ConfigSchema = z.object({
  BB_HOME: z.string().optional(),
  /**
   * A directory every replica reaches (NFS, a shared volume) holding the bottles,
   * so any replica can resume a bottle another machine ran. Unset: BB_HOME/bottles.
   */
  BB_BOTTLE_STORE: z
    .string()
    .regex(
      /^\/./,
      'BB_BOTTLE_STORE must be an absolute path to a directory every replica mounts (e.g. /mnt/bb-bottles), or unset to keep bottles in BB_HOME',
    )
    .optional(),
  FORGE_ORG: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,100}$/, 'FORGE_ORG must be an organisation name')
    .default('bot-bottle'),
  /** The forge kind; its own variables (e.g. FORGE_GITEA_API) say where it is. @default gitea */
  FORGE_KIND: z.string().optional(),
  /**
   * The bot user's token. Not needed (nor used) when the forge's site is its own
   * identity: a GitHub App (FORGE_GITHUB_APP_ID and FORGE_GITHUB_APP_KEY_FILE).
   */
  FORGE_TOKEN: z
    .string()
    .min(1, "FORGE_TOKEN is empty: set it to the bot user's token, or unset it")
    .optional(),
  FORGE_WEBHOOK_SECRET: z
    .string({ error: "FORGE_WEBHOOK_SECRET is required (the secret set on the forge's webhook)" })
    .min(8, 'FORGE_WEBHOOK_SECRET must be at least 8 characters'),
  /**
   * Secrets still accepted while the webhook's secret is changed, one per line:
   * set the old one here, change the hook, then unset it.
   */
  FORGE_WEBHOOK_SECRET_PREVIOUS: z
    .string()
    .optional()
    .transform((v, ctx) => {
      const list = (v ?? '')
        .split('\n')
        .map((s) => s.trim())
        .filter(Boolean);
      if (list.some((s) => s.length < 8)) {
        ctx.addIssue({
          code: 'custom',
          message:
            'FORGE_WEBHOOK_SECRET_PREVIOUS must hold secrets of at least 8 characters, one per line',
        });
        return z.NEVER;
      }
      return list;
    }),
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
          message: `${durationProblem('BB_SWEEP_INTERVAL', v)}, or 0 to turn the sweep off`,
        });
        return z.NEVER;
      }
      return ms;
    }),
  FORGE_WATCHDOG_INTERVAL: duration('FORGE_WATCHDOG_INTERVAL', '60s'),
  /**
   * Repositories the sweep looks at besides those that have bottles:
   * `owner/repo,org/*` (`org/*` is every repository of that org). Empty: every
   * repository the bot's user can reach.
   */
  FORGE_REPOS: z
    .string()
    .default('')
    .transform((v, ctx) => {
      const out: Array<{ owner: string; repo: string }> = [];
      for (const part of v
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean)) {
        const m = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+|\*)$/.exec(part);
        if (!m) {
          ctx.addIssue({
            code: 'custom',
            message: `FORGE_REPOS must be a comma-separated list of owner/repo or org/* (got ${JSON.stringify(part)})`,
          });
          return z.NEVER;
        }
        out.push({ owner: m[1]!, repo: m[2]! });
      }
      return out;
    }),
  /** A person's push to a bottle's PR wakes its agent. */
  FORGE_RESUME_ON_PUSH: toggle('FORGE_RESUME_ON_PUSH', 'off'),
  /** Only comments and reviews that mention the bot wake an agent. */
  FORGE_MENTION_ONLY: toggle('FORGE_MENTION_ONLY', 'off'),
  /** Say on the issue, once, why a targeted issue cannot launch. */
  FORGE_FEEDBACK: toggle('FORGE_FEEDBACK', 'on'),
  /**
   * Say on the thread, once per turn, how a turn ended when it ended without
   * `signal_done` (the watchdog, an exit without the signal, a stop from the forge,
   * an event given up after its retries).
   */
  BB_TURN_COMMENTS: toggle('BB_TURN_COMMENTS', 'on'),
  /** React 👀 to the comment or review that woke an agent. */
  FORGE_ACKNOWLEDGE: toggle('FORGE_ACKNOWLEDGE', 'on'),
  /**
   * Who may decide supervise requests on the forge thread (`/bb approve`, `/bb
   * reject`): a comma-separated list of logins. Unset: the repository's admins.
   */
  BB_SUPERVISE_DECIDERS: logins('BB_SUPERVISE_DECIDERS'),
  /**
   * Other bots on the forge (a comma-separated list of logins): what they comment,
   * review or push never wakes an agent. The bot itself is never heard anyway.
   */
  BB_IGNORE_USERS: logins('BB_IGNORE_USERS'),
  /** How long one turn may run before it is stopped and the thread asked (`off`: no cap). */
  BB_BUDGET_TURN_TIME: z
    .string()
    .default('2h')
    .transform((v, ctx) => {
      if (v.trim().toLowerCase() === 'off') return undefined;
      const ms = parseDuration(v);
      if (ms === undefined || ms <= 0) {
        ctx.addIssue({ code: 'custom', message: durationProblem('BB_BUDGET_TURN_TIME', v) });
        return z.NEVER;
      }
      return ms;
    }),
  /** Tokens one turn may use (every kind; `500k`, `2m`). Unset: no cap. An agent's manifest `budget` overrides each cap. */
  BB_BUDGET_TURN_TOKENS: tokens('BB_BUDGET_TURN_TOKENS'),
  /** Estimated US dollars one turn may spend (`5`, `0.50`). Unset: no cap. */
  BB_BUDGET_TURN_USD: dollars('BB_BUDGET_TURN_USD'),
  /** Tokens one issue's bottle may use over all its turns. Unset: no cap. */
  BB_BUDGET_ISSUE_TOKENS: tokens('BB_BUDGET_ISSUE_TOKENS'),
  /** Estimated US dollars one issue's bottle may spend over all its turns. Unset: no cap. */
  BB_BUDGET_ISSUE_USD: dollars('BB_BUDGET_ISSUE_USD'),
  /** Tokens all agents together may use in a day (UTC); past it new turns wait. Unset: no cap. */
  BB_BUDGET_DAY_TOKENS: tokens('BB_BUDGET_DAY_TOKENS'),
  /** Estimated US dollars all agents together may spend in a day (UTC). Unset: no cap. */
  BB_BUDGET_DAY_USD: dollars('BB_BUDGET_DAY_USD'),
  /** What wakes a bottle stopped at a cap: `command` (only `/bb continue`) or `reply` (any reply). */
  BB_BUDGET_RESUME: z.enum(['command', 'reply']).default('command'),
  /** Turns in a row without a new push before the agent is paused and the thread asked. */
  BB_LOOP_IDLE_TURNS: count('BB_LOOP_IDLE_TURNS', '8', 1000),
  /** Comments one turn may post before it is stopped and the thread asked. */
  BB_LOOP_TURN_COMMENTS: count('BB_LOOP_TURN_COMMENTS', '20', 10_000),
  /**
   * Auto mode: a supervise request the analyser finds harmless (a proxy change within
   * the operator's ceiling, nothing above info) is approved at once, decided by
   * `auto`, and announced on its issue; anything else waits for a person.
   */
  BB_SUPERVISE_AUTO: toggle('BB_SUPERVISE_AUTO', 'off'),
  /** `docker` (default) or `local` (no isolation; development only). */
  /**
   * Where state lives: unset, the SQLite file in BB_HOME; `postgres://…`, that
   * PostgreSQL database (for several orchestrators sharing the work).
   */
  BB_DATABASE_URL: z
    .string()
    .regex(
      /^postgres(ql)?:\/\/./,
      'BB_DATABASE_URL must be a postgres:// URL (e.g. postgres://bb:secret@db.internal:5432/bot_bottle), or unset for the SQLite file in BB_HOME',
    )
    .optional(),
  /**
   * This orchestrator's name among those sharing BB_DATABASE_URL (keep it across
   * its restarts; never two running with one name). Default: `<host>:<BB_PORT>`.
   */
  BB_REPLICA_ID: z
    .string()
    .regex(
      /^[\w.:@/-]{1,200}$/,
      'BB_REPLICA_ID must be 1 to 200 letters, digits and . : @ / _ - (e.g. bb-1)',
    )
    .optional(),
  /**
   * How long an issue's lease lasts unrenewed: an orchestrator that stops is
   * taken over after this (plus a third of it at most).
   */
  BB_LEASE_TTL: z
    .string()
    .default('15s')
    .transform((v, ctx) => {
      const ms = parseDuration(v);
      if (ms === undefined || ms < 1000 || ms > 3_600_000) {
        ctx.addIssue({
          code: 'custom',
          message: `${durationProblem('BB_LEASE_TTL', v)}; from 1s to 1h`,
        });
        return z.NEVER;
      }
      return ms;
    }),
  /** A backend registered with `@bb/headless` (`docker`, `local`, or one of yours). */
  BB_BACKEND: z.string().default('docker'),
  /** Issues whose events are decided at once (decisions are short: a turn never holds one). */
  BB_CONCURRENCY: count('BB_CONCURRENCY', '64', 999),
  /** Bottles being started at once (clone, create, start: the disk- and CPU-heavy part). */
  BB_STARTUP_CONCURRENCY: count('BB_STARTUP_CONCURRENCY', '2', 64),
  /**
   * The warm pool: bottles kept ready ahead of their issues for the agents named
   * (`implementer:4,reviewer:1`), so a launch binds one instead of making it.
   * Refilled in the background while the memory budget has room. Docker only.
   */
  BB_POOL: z
    .string()
    .default('')
    .transform((v, ctx) => {
      try {
        return parsePoolSizes(v);
      } catch (err) {
        ctx.addIssue({ code: 'custom', message: errorMessage(err) });
        return z.NEVER;
      }
    }),
  /**
   * Memory all running bottles may take together (each counts its limit);
   * work that does not fit waits, in order. @default the host's memory
   */
  BB_MEMORY_BUDGET: z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return undefined;
      const bytes = parseBytes(v);
      if (bytes === undefined || bytes <= 0) {
        ctx.addIssue({
          code: 'custom',
          message: `BB_MEMORY_BUDGET must be a size such as 16g or 512m (got ${JSON.stringify(v)})`,
        });
        return z.NEVER;
      }
      return bytes;
    }),
  /** How long an agent that signalled done may take to exit before it is stopped. */
  BB_DONE_GRACE: duration('BB_DONE_GRACE', '10s'),
  /**
   * How long a bottle stays warm after its turn (its containers paused, so a
   * comment inside the window resumes it without making containers); 0 or off
   * turns it off. Warm bottles count in BB_MEMORY_BUDGET and are cooled first
   * when room is needed.
   */
  BB_WARM_WINDOW: z
    .string()
    .default('3m')
    .transform((v, ctx) => {
      if (['0', 'off'].includes(v.trim().toLowerCase())) return 0;
      const ms = parseDuration(v);
      if (ms === undefined || ms <= 0 || ms > 24 * 3_600_000) {
        ctx.addIssue({
          code: 'custom',
          message: `${durationProblem('BB_WARM_WINDOW', v)}; 0 or off turns it off, 24h at most`,
        });
        return z.NEVER;
      }
      return ms;
    }),
  /**
   * How long handled deliveries are remembered (a redelivery inside this
   * window is recognised as one); older ones are pruned hourly.
   */
  BB_LEDGER_RETENTION: duration('BB_LEDGER_RETENTION', '14d'),
});
export type OrchestratorConfig = z.infer<typeof ConfigSchema> & {
  /** The forge kind `FORGE_KIND` names and the site its variables describe. */
  forge: { kind: ForgeKind; site: ForgeSite };
};

/**
 * Read the orchestrator's configuration, the forge kind's own variables with
 * it (from `kinds`, the process's registry unless told). One line per bad
 * value; secrets never echoed.
 */
export function loadConfig(
  env: Record<string, string | undefined>,
  kinds: ForgeKindRegistry = forgeKinds,
): OrchestratorConfig {
  const r = ConfigSchema.safeParse(env);
  const problems = r.success ? [] : r.error.issues.map((i) => `- ${i.message}`);
  let forge: OrchestratorConfig['forge'] | undefined;
  try {
    forge = kinds.fromEnv(env);
  } catch (err) {
    problems.push(
      ...errorMessage(err)
        .split('\n')
        .filter(Boolean)
        .map((l) => (l.startsWith('- ') ? l : `- ${l}`)),
    );
  }
  try {
    backendKinds.check(env['BB_BACKEND'] || 'docker');
  } catch (err) {
    problems.push(`- ${errorMessage(err)}`);
  }
  // A site that is its own identity needs no token (when the site could not be read, an
  // App it names has said what is wrong already).
  const ownIdentity = forge ? !!forge.site.credentials : !!env['FORGE_GITHUB_APP_ID'];
  // Both would leave it unclear who acts, and every bottle would get the bot's one token.
  if (ownIdentity && env['FORGE_TOKEN'])
    problems.push(
      '- FORGE_TOKEN is set as well as a site identity of its own (a GitHub App): unset one; with an App each bottle gets a token of its own',
    );
  if (!ownIdentity && !env['FORGE_TOKEN'])
    problems.push(
      `- FORGE_TOKEN is required (a token of the bot user, a member of FORGE_ORG)${forge?.kind.name === 'github' ? ', or a GitHub App: FORGE_GITHUB_APP_ID and FORGE_GITHUB_APP_KEY_FILE' : ''}`,
    );
  if (r.success && forge && problems.length === 0) return { ...r.data, forge };
  throw new BbError(
    'INVALID_INPUT',
    `the orchestrator's configuration is invalid:\n${[...new Set(problems)].join('\n')}`,
  );
}

/** Every secret a delivery may be signed with: the current one first. */
export function webhookSecretsOf(config: OrchestratorConfig): string[] {
  return [config.FORGE_WEBHOOK_SECRET, ...config.FORGE_WEBHOOK_SECRET_PREVIOUS];
}
