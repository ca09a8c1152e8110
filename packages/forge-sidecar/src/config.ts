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
  FORGE_GITEA_API: z.url({
    error: 'FORGE_GITEA_API must be the Gitea API URL, e.g. https://gitea.example.com/api/v1',
  }),
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
  FORGE_TOKEN: z.string({ error: 'FORGE_TOKEN is required' }).min(1, 'FORGE_TOKEN is required'),
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
  /** Optional: the uid:gid that may connect (the agent's), given the socket and its directory. */
  BB_SOCKET_OWNER: z
    .string()
    .regex(/^\d+:\d+$/, 'BB_SOCKET_OWNER must be uid:gid, e.g. 1000:1000')
    .optional(),
  BB_SLUG: z.string().optional(),
});

export type SidecarEnv = z.infer<typeof SidecarEnvSchema>;

/**
 * Read and check the configuration. Throws one INVALID_INPUT listing every bad
 * value, each on its own line; the token's value is never echoed.
 */
export function loadSidecarEnv(env: Record<string, string | undefined>): SidecarEnv {
  const result = SidecarEnvSchema.safeParse(env);
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
