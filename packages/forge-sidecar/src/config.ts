import { readFileSync } from 'node:fs';
import { BbError } from '@bb/errors';
import { z } from 'zod';

const positiveInt = (name: string) =>
  z
    .string({ error: `${name} is required` })
    .regex(/^[1-9]\d{0,9}$/, `${name} must be a positive whole number`)
    .transform(Number);

const absPath = (name: string) =>
  z
    .string({ error: `${name} is required` })
    .min(1, `${name} is required`)
    .refine((p) => p.startsWith('/'), `${name} must be an absolute path`);

/** The sidecar's configuration, from its environment. */
export const SidecarEnvSchema = z.object({
  /**
   * The forge kind (a name `@bb/forge` registers; its own variables configure
   * it). @default the registry's default kind
   */
  FORGE_KIND: z
    .string()
    .regex(/^[a-z][a-z0-9-]{0,30}$/, 'FORGE_KIND must be a forge kind name such as gitea')
    .optional(),
  /** An ES module file whose default export is the forge kind (one not built in). */
  FORGE_KIND_MODULE: absPath('FORGE_KIND_MODULE').optional(),
  FORGE_OWNER: z
    .string({ error: 'FORGE_OWNER is required' })
    .regex(/^[A-Za-z0-9_.-]{1,100}$/, 'FORGE_OWNER must be a forge user or org name'),
  FORGE_REPO: z
    .string({ error: 'FORGE_REPO is required' })
    .regex(/^[A-Za-z0-9_.-]{1,100}$/, 'FORGE_REPO must be a repository name'),
  FORGE_ISSUE_NUMBER: positiveInt('FORGE_ISSUE_NUMBER'),
  FORGE_PR_NUMBER: z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v === '') return undefined;
      if (!/^[1-9]\d{0,9}$/.test(v)) {
        ctx.addIssue({
          code: 'custom',
          message: 'FORGE_PR_NUMBER must be empty or a positive whole number',
        });
        return z.NEVER;
      }
      return Number(v);
    }),
  /** The token itself; prefer FORGE_TOKEN_FILE, which keeps it out of the process's environment. */
  FORGE_TOKEN: z
    .string()
    .optional()
    .transform((v) => v || undefined),
  /** A file holding the token, read once at start (bottles use a 0400 file on a tmpfs). */
  FORGE_TOKEN_FILE: absPath('FORGE_TOKEN_FILE').optional(),
  BB_SIDECAR_SOCKET: absPath('BB_SIDECAR_SOCKET'),
  BB_QUEUE_DIR: absPath('BB_QUEUE_DIR'),
  BB_OPS_LOG: absPath('BB_OPS_LOG'),
  BB_WORKSPACE: absPath('BB_WORKSPACE'),
  BB_BRANCH: z
    .string({ error: 'BB_BRANCH is required' })
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$/,
      'BB_BRANCH must be a branch name such as bb/implementer-17',
    )
    .refine(
      (b) => !b.includes('..') && !b.endsWith('/') && !b.endsWith('.lock'),
      'BB_BRANCH is not a valid branch name',
    ),
  /**
   * `1`: before this turn's agent starts, fetch BB_BRANCH from the forge and leave
   * a bundle of it next to the socket for the agent's checkout (a resumed turn).
   */
  BB_SYNC_PR: z.enum(['0', '1'], { error: 'BB_SYNC_PR must be 0 or 1' }).optional(),
  /** The launch's base commit (the checkout has it): the bundle starts after it. */
  BB_BASE_COMMIT: z
    .string()
    .regex(/^[0-9a-f]{40}([0-9a-f]{24})?$/, 'BB_BASE_COMMIT must be a full commit id')
    .optional(),
  /**
   * A file the host writes each turn's number into, where the agent cannot (a
   * warm bottle's gate serves several turns): a `signal_done` closes writes
   * until it says a later turn. Without it, one sidecar serves one turn.
   */
  BB_TURN_FILE: absPath('BB_TURN_FILE').optional(),
  /**
   * Fencing (`hold.ts`): a file the host renews with this gate's id and a deadline,
   * where the agent cannot write. With it, a forge write is sent only while the file
   * names this gate (BB_HOLD_ID) and its deadline is ahead. Without it, none is asked.
   */
  BB_HOLD_FILE: absPath('BB_HOLD_FILE').optional(),
  /** This gate's id in BB_HOLD_FILE; required with it. */
  BB_HOLD_ID: z
    .string()
    .regex(/^[A-Za-z0-9_-]{8,64}$/, 'BB_HOLD_ID must be 8 to 64 letters, digits, _ or -')
    .optional(),
  /** The sidecar's own bare repository, where the agent's commits are received and pushed from. @default `<dir of BB_OPS_LOG>/push.git` */
  BB_GIT_DIR: absPath('BB_GIT_DIR').optional(),
  /**
   * An object store the push repository borrows from, read-only: the mirror the
   * workspace was checked out from (its `objects` directory). With BB_BASE_COMMIT,
   * the base's history is taken from there instead of the workspace.
   */
  BB_GIT_ALTERNATE: absPath('BB_GIT_ALTERNATE').optional(),
  /**
   * The socket's mode, octal: `600` (default) lets only the sidecar's user
   * connect; `666` lets an agent running as another user connect, in a
   * directory only the sidecar's user can change.
   */
  BB_SOCKET_MODE: z
    .string()
    .regex(/^0?[0-7]{3}$/, 'BB_SOCKET_MODE must be an octal mode such as 600 or 666')
    .optional()
    .transform((v) => (v === undefined ? undefined : Number.parseInt(v, 8))),
  /** The sidecar's push repository never grows past this many bytes. @default 16 GiB */
  BB_GIT_DIR_MAX: z
    .string()
    .regex(/^[1-9]\d{5,14}$/, 'BB_GIT_DIR_MAX must be a number of bytes')
    .optional()
    .transform((v) => (v === undefined ? undefined : Number(v))),
  /** The op log's size limit in bytes. @default 67108864 */
  BB_OPS_LOG_MAX: z
    .string()
    .regex(/^[1-9]\d{3,11}$/, 'BB_OPS_LOG_MAX must be a number of bytes (at least 1000)')
    .optional()
    .transform((v) => (v === undefined ? undefined : Number(v))),
  /** Optional: the uid:gid that may connect (the agent's), given the socket and its directory. */
  BB_SOCKET_OWNER: z
    .string()
    .regex(/^\d+:\d+$/, 'BB_SOCKET_OWNER must be uid:gid, e.g. 1000:1000')
    .optional(),
  BB_SLUG: z.string().optional(),
});

export type SidecarEnv = z.infer<typeof SidecarEnvSchema>;

/** The token: FORGE_TOKEN_FILE's content (read once) or FORGE_TOKEN. */
export function readSidecarToken(env: SidecarEnv): string {
  if (env.FORGE_TOKEN_FILE) {
    let text: string;
    try {
      text = readFileSync(env.FORGE_TOKEN_FILE, 'utf8').trim();
    } catch (err) {
      throw new BbError(
        'INVALID_INPUT',
        `FORGE_TOKEN_FILE ${env.FORGE_TOKEN_FILE} cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
      );
    }
    if (!text)
      throw new BbError('INVALID_INPUT', `FORGE_TOKEN_FILE ${env.FORGE_TOKEN_FILE} is empty`);
    return text;
  }
  if (env.FORGE_TOKEN) return env.FORGE_TOKEN;
  throw new BbError('INVALID_INPUT', 'set FORGE_TOKEN_FILE (or FORGE_TOKEN) to the forge token');
}

/**
 * Read and check the configuration. Throws one INVALID_INPUT listing every bad
 * value, each on its own line; the token's value is never echoed.
 */
export function loadSidecarEnv(env: Record<string, string | undefined>): SidecarEnv {
  const result = SidecarEnvSchema.safeParse(env);
  if (result.success && !result.data.BB_HOLD_FILE !== !result.data.BB_HOLD_ID)
    throw new BbError(
      'INVALID_INPUT',
      "the forge sidecar's configuration is invalid:\n- BB_HOLD_FILE and BB_HOLD_ID go together: set both (fencing) or neither",
      { data: { fields: ['BB_HOLD_FILE', 'BB_HOLD_ID'] } },
    );
  if (result.success) return result.data;
  const lines = result.error.issues.map((i) => `- ${i.message}`);
  throw new BbError(
    'INVALID_INPUT',
    `the forge sidecar's configuration is invalid:\n${[...new Set(lines)].join('\n')}`,
    {
      data: { fields: result.error.issues.map((i) => i.path.join('.')) },
    },
  );
}
