import { createHash } from 'node:crypto';
import { z } from 'zod';

/**
 * The three kinds of configuration a stuck agent can ask to change, each a
 * whole file. The tool an agent calls is a hint; the file decides (see
 * `classifyFile`).
 */
export const KINDS = {
  routes: {
    tool: 'cred-proxy-block',
    file: 'routes.json',
    field: 'routes',
    when: 'a credentialed request through the credential proxy was refused (no route, wrong scope)',
    applies: 'the credential proxy reloads the routes in place',
  },
  allowlist: {
    tool: 'pipelock-block',
    file: 'allowlist.json',
    field: 'allowlist',
    when: 'the egress proxy refused a host, port or protocol',
    applies: 'the egress proxy swaps in the allowlist; new connections see it',
  },
  dockerfile: {
    tool: 'capability-block',
    file: 'Dockerfile',
    field: 'dockerfile',
    when: 'the image lacks a tool, package, permission or environment variable',
    applies:
      'the image is rebuilt on the host and the agent continues in a new container on the same workspace and session',
  },
} as const;

export type ProposalKind = keyof typeof KINDS;
export const KIND_NAMES = Object.keys(KINDS) as ProposalKind[];
export type ToolName = (typeof KINDS)[ProposalKind]['tool'];
export const TOOL_NAMES = KIND_NAMES.map((k) => KINDS[k].tool) as ToolName[];

export const kindOfTool = (tool: string): ProposalKind | undefined =>
  KIND_NAMES.find((k) => KINDS[k].tool === tool);

/** Where the bottle's current configuration is readable (read-only) inside the bottle. */
export const CURRENT_CONFIG_DIR = '/etc/bot-bottle/current-config';

/** The largest proposed file accepted (a routes file, an allowlist or a Dockerfile). */
export const MAX_FILE_BYTES = 64 * 1024;
export const MAX_JUSTIFICATION = 4000;

export type RequestStatus =
  | 'pending'
  | 'approved'
  | 'modified'
  | 'rejected'
  | 'expired'
  | 'cancelled';
export const FINAL_STATUSES: RequestStatus[] = [
  'approved',
  'modified',
  'rejected',
  'expired',
  'cancelled',
];

/**
 * Through what a decision was made: a `/bb` comment on the forge, the HTTP API
 * (an operator's token), `bb supervise` on the orchestrator's host (its commands
 * or its inbox), auto mode, or bot-bottle itself (expiry, a destroyed bottle).
 */
export type DecisionChannel = 'forge' | 'api' | 'cli' | 'tui' | 'auto' | 'system';
export const CHANNELS: DecisionChannel[] = ['forge', 'api', 'cli', 'tui', 'auto', 'system'];

/** How far an approval reaches. */
export type DecisionScope = 'turn' | 'bottle' | 'manifest';
export const SCOPES: DecisionScope[] = ['turn', 'bottle', 'manifest'];

const fileText = (name: string) =>
  z
    .string()
    .min(1, `${name} must be the whole proposed file, not empty`)
    .max(MAX_FILE_BYTES, `${name} is larger than ${MAX_FILE_BYTES} bytes`);
const justification = z
  .string()
  .trim()
  .min(10, 'say why you need this change, in a sentence or more')
  .max(MAX_JUSTIFICATION);

/** The arguments of each tool, as agents send them (MCP input schemas are derived from these). */
export const TOOL_ARGS = {
  'cred-proxy-block': z.object({ routes: fileText('routes'), justification }).strict(),
  'pipelock-block': z.object({ allowlist: fileText('allowlist'), justification }).strict(),
  'capability-block': z.object({ dockerfile: fileText('dockerfile'), justification }).strict(),
} as const;

/** A supervise request's id, as the sidecar makes it: `sr_` and 20 random letters or digits. */
export const REQUEST_ID = /^sr_[a-z0-9]{20}$/;

export const WaitArgs = z
  .object({
    request_id: z.string().regex(REQUEST_ID, 'a request id such as sr_…, from a proposal'),
    /** How long to wait for a decision before answering `pending`, within the server's bound. */
    wait_ms: z.number().int().min(0).max(600_000).optional(),
  })
  .strict();

/** The sidecar's `propose` method: any tool, its arguments, and how long to wait. */
export const ProposeParams = z
  .object({
    tool: z.enum(TOOL_NAMES as [ToolName, ...ToolName[]]),
    args: z.record(z.string(), z.unknown()),
    wait_ms: z.number().int().min(0).max(600_000).optional(),
  })
  .strict();

/** What a tool call (and `supervise_wait`) answers. */
export interface ToolAnswer {
  status: RequestStatus;
  request_id: string;
  kind: ProposalKind;
  /** What to do next, in words the agent reads. */
  message: string;
  /** `modified`: the file the operator approved instead. `approved`: the file as proposed. */
  file?: string;
  /** `rejected`: the operator's reason, verbatim. */
  reason?: string;
  /** How far the approval reaches. */
  scope?: DecisionScope;
}

/** A request as the sidecar writes it for the host (`supervise/requests/<id>.json`). */
export const RequestFileSchema = z
  .object({
    id: z.string().regex(REQUEST_ID),
    slug: z.string().min(1).max(80),
    kind: z.enum(['routes', 'allowlist', 'dockerfile']),
    tool: z.string().max(40),
    file: z.string().max(MAX_FILE_BYTES),
    justification: z.string().max(MAX_JUSTIFICATION),
    baseHash: z.string().regex(/^[0-9a-f]{64}$/),
    candidateHash: z.string().regex(/^[0-9a-f]{64}$/),
    createdAt: z.string(),
    expiresAt: z.string(),
    /** The tool named another file than the one proposed: routed by the file. */
    rerouted: z.boolean().optional(),
  })
  .strict();
export type RequestFile = z.infer<typeof RequestFileSchema>;

/** A decision as the host writes it for the sidecar (`supervise/decisions/<id>.json`). */
export const DecisionFileSchema = z
  .object({
    id: z.string(),
    status: z.enum(['approved', 'modified', 'rejected', 'expired', 'cancelled']),
    scope: z.enum(['turn', 'bottle', 'manifest']).optional(),
    file: z.string().optional(),
    reason: z.string().optional(),
    decidedAt: z.string(),
  })
  .strict();
export type DecisionFile = z.infer<typeof DecisionFileSchema>;

export const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Which file a proposal changes, from its content: a Dockerfile has a `FROM`;
 * JSON with `routes` is the routes file; JSON with `allow` the allowlist.
 */
export function classifyFile(text: string): ProposalKind | undefined {
  const t = text.trim();
  if (t.startsWith('{')) {
    try {
      const v = JSON.parse(t) as Record<string, unknown>;
      if (v && typeof v === 'object') {
        if ('routes' in v) return 'routes';
        if ('allow' in v) return 'allowlist';
      }
    } catch {
      return undefined;
    }
    return undefined;
  }
  return /^\s*FROM\s/im.test(text) ? 'dockerfile' : undefined;
}

/**
 * Text an agent wrote, made safe to show on a terminal: `@bb/wall`'s
 * `forTerminal`, kept under this name for this package's users.
 */
export { forTerminal as printable, UNPRINTABLE } from '@bb/wall';
