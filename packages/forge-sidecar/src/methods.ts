import { BbError, errorMessage, isBbError } from '@bb/errors';
import type { ScopedForge } from '@bb/forge';
import { z } from 'zod';
import { pushHead, remoteDefaultBranch } from './git-push';
import type { OpLog, OpOutcome } from './op-log';
import type { CheckinThrottle, DoneSignal, QueueWriter } from './queue';

const MAX_INT = 2_147_483_647;
const number = z
  .number({ error: 'number must be a number (not a string)' })
  .int('number must be a whole number')
  .positive('number must be positive')
  .max(MAX_INT, 'number is too large');
const body = z
  .string({ error: 'body must be a string' })
  .max(65_535, 'body is longer than 65535 characters');

/** The parameters of every method, checked before anything else happens. */
export const PARAMS = {
  read_issue: z.object({ number }).strict(),
  read_pr: z.object({ number }).strict(),
  read_comments: z.object({ number }).strict(),
  post_comment: z.object({ number, body: body.min(1, 'body must not be empty') }).strict(),
  update_description: z.object({ number, body }).strict(),
  open_pr: z
    .object({
      title: z
        .string({ error: 'title must be a string' })
        .min(1, 'title must not be empty')
        .max(255),
      body: body.default(''),
      base: z
        .string()
        .regex(/^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$/, 'base must be a branch name')
        .optional(),
    })
    .strict(),
  push: z.object({}).strict(),
  signal_done: z
    .object({
      status: z.enum(['success', 'failure', 'blocked'], {
        error: 'status must be success, failure or blocked',
      }),
      summary: z
        .string({ error: 'summary must be a string' })
        .min(1, 'summary must not be empty')
        .max(4000),
    })
    .strict(),
} as const;

export type MethodName = keyof typeof PARAMS;
export const METHOD_NAMES = Object.keys(PARAMS) as MethodName[];

export interface MethodContext {
  forge: ScopedForge;
  opLog: OpLog;
  queue: QueueWriter;
  checkins: CheckinThrottle;
  workspace: string;
  branch: string;
}

interface Described {
  target: string;
  summary: string;
  result: unknown;
  /** For write methods: what the orchestrator should learn (e.g. a PR number). */
  op?: Record<string, unknown>;
}

function parse<M extends MethodName>(method: M, params: unknown): z.infer<(typeof PARAMS)[M]> {
  const result = PARAMS[method].safeParse(params ?? {});
  if (!result.success) {
    throw new BbError(
      'INVALID_INPUT',
      `invalid params for ${method}: ${result.error.issues.map((i) => `${i.path.join('.') || 'params'}: ${i.message}`).join('; ')}`,
      {
        data: result.error.issues.map((i) => ({ path: i.path.map(String), message: i.message })),
      },
    );
  }
  return result.data as z.infer<(typeof PARAMS)[M]>;
}

async function run(ctx: MethodContext, method: MethodName, params: unknown): Promise<Described> {
  const f = ctx.forge;
  switch (method) {
    case 'read_issue': {
      const p = parse(method, params);
      return {
        target: `#${p.number}`,
        summary: `read issue #${p.number}`,
        result: await f.readIssue(p.number),
      };
    }
    case 'read_pr': {
      const p = parse(method, params);
      return {
        target: `#${p.number}`,
        summary: `read PR #${p.number}`,
        result: await f.readPr(p.number),
      };
    }
    case 'read_comments': {
      const p = parse(method, params);
      const comments = await f.readComments(p.number);
      return {
        target: `#${p.number}`,
        summary: `read ${comments.length} comments of #${p.number}`,
        result: comments,
      };
    }
    case 'post_comment': {
      const p = parse(method, params);
      const c = await f.postComment(p.number, p.body);
      return {
        target: `#${p.number}`,
        summary: `posted comment to #${p.number} (${p.body.length} chars)`,
        result: c,
        op: { commentId: c.id, number: p.number },
      };
    }
    case 'update_description': {
      const p = parse(method, params);
      await f.updateDescription(p.number, p.body);
      return {
        target: `#${p.number}`,
        summary: `updated the description of #${p.number}`,
        result: { ok: true },
        op: { number: p.number },
      };
    }
    case 'open_pr': {
      const p = parse(method, params);
      const remote = f.gitRemote();
      if (!remote) throw new BbError('FORGE_ERROR', 'this forge cannot push branches');
      const { sha } = await pushHead(ctx.workspace, remote, ctx.branch);
      const base = p.base ?? (await remoteDefaultBranch(ctx.workspace, remote)) ?? 'main';
      const pr = await f.openPr({ head: ctx.branch, base, title: p.title, body: p.body });
      return {
        target: `branch ${ctx.branch}`,
        summary: `opened PR #${pr.number} from ${ctx.branch} into ${base} at ${sha.slice(0, 7)}`,
        result: pr,
        op: { prNumber: pr.number, sha, base },
      };
    }
    case 'push': {
      parse(method, params);
      const remote = f.gitRemote();
      if (!remote) throw new BbError('FORGE_ERROR', 'this forge cannot push branches');
      const { sha } = await pushHead(ctx.workspace, remote, ctx.branch);
      return {
        target: `branch ${ctx.branch}`,
        summary: `pushed ${ctx.branch} at ${sha.slice(0, 7)}`,
        result: { sha },
        op: { sha },
      };
    }
    case 'signal_done': {
      const p = parse(method, params) as DoneSignal;
      ctx.queue.write('done', { status: p.status, summary: p.summary });
      return {
        target: `#${f.issue}`,
        summary: `signalled done: ${p.status}`,
        result: { ok: true },
      };
    }
  }
}

function targetOf(params: unknown, ctx: MethodContext): string {
  const n = (params as { number?: unknown } | undefined)?.number;
  if (typeof n === 'number' && Number.isSafeInteger(n)) return `#${n}`;
  return n === undefined ? `#${ctx.forge.issue}` : `(${typeof n})`;
}

/**
 * Run one method: check its params, call the forge, and write the op-log line
 * and the queue events — whatever the outcome. A denied or invalid write makes no
 * forge request.
 */
export async function callMethod(
  ctx: MethodContext,
  method: MethodName,
  params: unknown,
): Promise<unknown> {
  let outcome: OpOutcome = 'ok';
  let reason: string | undefined;
  let described: Described | undefined;
  try {
    described = await run(ctx, method, params);
    return described.result;
  } catch (err) {
    outcome =
      isBbError(err, 'SCOPE_DENIED') || isBbError(err, 'INVALID_INPUT') ? 'rejected' : 'error';
    reason = errorMessage(err);
    throw err;
  } finally {
    const target = described?.target ?? targetOf(params, ctx);
    const verb = method.replace('_', ' ');
    const entry = ctx.opLog.append({
      method,
      target,
      outcome,
      ...(reason === undefined ? {} : { reason }),
      summary:
        described?.summary ??
        `${outcome === 'rejected' ? 'refused' : 'failed'} ${verb} on ${target}`,
    });
    // The op log's head travels with every check-in, so the orchestrator holds an
    // anchor that protects even the log's last line.
    ctx.checkins.checkin({
      method,
      outcome,
      opLogHead: ctx.opLog.head.hash,
      opLogSeq: ctx.opLog.head.seq,
    });
    if (outcome === 'ok' && described?.op)
      ctx.queue.write('op', { method, seq: entry.seq, ...described.op });
  }
}
