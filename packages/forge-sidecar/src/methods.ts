import { BbError, errorMessage, isBbError } from '@bb/errors';
import type { ScopedForge } from '@bb/forge';
import type { z } from 'zod';
import { type MethodName, PARAMS, WRITE_METHODS } from './contract';
import { type GitGate, pushCommit, remoteDefaultBranch } from './git-push';
import { hostOnlyText } from './host-text';
import { MAX_LINE_BYTES, type OpLog, type OpOutcome } from './op-log';
import type { CheckinThrottle, DoneSignal, QueueWriter } from './queue';

export { METHOD_NAMES, type MethodName, PARAMS, WRITE_METHODS } from './contract';

export interface MethodContext {
  forge: ScopedForge;
  opLog: OpLog;
  queue: QueueWriter;
  checkins: CheckinThrottle;
  /** Where the agent's commits are read (as data) and pushed from. */
  git: GitGate;
  branch: string;
  /** The turn being served, as the host says. */
  turn: () => number;
  /** Fencing: why the host does not hold the issue now (`undefined`: it does, or none is asked). */
  notHeld?: () => string | undefined;
  /** The first `signal_done` of a turn, once it happened: every later write of that turn is refused. */
  done?: (DoneSignal & { turn: number }) | undefined;
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

/**
 * How a failed forge write ended. A request that may have reached the forge (a
 * timeout, a connection cut after sending) is `unknown`: the agent is told to
 * read before it retries. One refused before any request is `rejected`.
 */
function outcomeOf(err: unknown): OpOutcome {
  if (
    isBbError(err, 'SCOPE_DENIED') ||
    isBbError(err, 'INVALID_INPUT') ||
    isBbError(err, 'ALREADY_DONE') ||
    isBbError(err, 'AUDIT_UNAVAILABLE')
  )
    return 'rejected';
  if (isBbError(err, 'TIMEOUT')) return 'unknown';
  // A push that failed after it connected may have updated the branch.
  if (isBbError(err, 'PUSH_FAILED') && (err as BbError<{ maybeSent?: boolean }>).data?.maybeSent)
    return 'unknown';
  if (isBbError(err, 'FORGE_UNAVAILABLE')) {
    const data = (err as BbError<{ status?: number }>).data;
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? '';
    // The forge answered (5xx): it said no. A connection never made: nothing was sent.
    if (data?.status !== undefined) return 'error';
    if (/ECONNREFUSED|ENOTFOUND|EAI_AGAIN|UND_ERR_CONNECT_TIMEOUT/.test(cause)) return 'error';
    return 'unknown';
  }
  return 'error';
}

/**
 * One forge write, under the fail-closed audit: the `started` line is written
 * and flushed, and the op log's new head relayed, before the request; if either
 * cannot be written, there is no request. The outcome gets its own line.
 */
async function audited<T>(
  ctx: MethodContext,
  method: string,
  what: {
    target: string;
    intent: string;
    done: (r: T) => string;
    /** Relayed before the request (a push's commit id), so it is known whatever happens next. */
    relay?: Record<string, unknown>;
  },
  request: () => Promise<T>,
): Promise<T> {
  // Checked here, with no await before the started line: a write racing signal_done loses.
  assertOpen(ctx, method);
  // Asked again at the write itself: the call may have waited (a push's commits read).
  assertHeld(ctx, method);
  const start = ctx.opLog.append(
    { method, target: what.target, outcome: 'started', summary: what.intent },
    { sync: true, reserve: MAX_LINE_BYTES },
  );
  ctx.checkins.now({ method, outcome: 'started', ...what.relay, ...headOf(ctx) });
  let result: T;
  try {
    result = await request();
  } catch (err) {
    const outcome = outcomeOf(err);
    ctx.opLog.append({
      method,
      target: what.target,
      outcome,
      reason: errorMessage(err),
      summary: `${outcome === 'unknown' ? 'no answer to' : 'failed to'} ${what.intent}`,
      attempt: start.seq,
    });
    ctx.checkins.checkin({ method, outcome, ...headOf(ctx) });
    const thrown =
      outcome === 'unknown'
        ? new BbError(
            'OUTCOME_UNKNOWN',
            `${what.intent}: the forge did not answer, so it may or may not have happened; read ${what.target} before you try again`,
            { cause: err },
          )
        : err;
    if (typeof thrown === 'object' && thrown !== null) AUDITED.add(thrown);
    throw thrown;
  }
  ctx.opLog.append({
    method,
    target: what.target,
    outcome: 'ok',
    summary: what.done(result),
    attempt: start.seq,
  });
  // The head now covers the outcome line too (relayed at most once a second, and at shutdown).
  ctx.checkins.checkin({ method, outcome: 'ok', ...headOf(ctx) });
  return result;
}

/** Refuse a write once the turn signalled done. */
function assertOpen(ctx: MethodContext, method: string): void {
  // Closed for the turn that signalled, until the host says a later one.
  if (ctx.done && ctx.turn() <= ctx.done.turn)
    throw new BbError(
      'ALREADY_DONE',
      `this turn already ended with signal_done (${ctx.done.status}); ${method.replace('_', ' ')} is closed until a new turn`,
    );
}

/**
 * Refuse any call the host no longer vouches for (fencing, `hold.ts`): a gate its
 * host does not hold the issue for serves nothing, and writes nothing where the
 * host that holds it now reads (the op log, the queue): they may be that host's.
 */
function assertHeld(ctx: MethodContext, method: string): void {
  const why = ctx.notHeld?.();
  if (why === undefined) return;
  const err = new BbError(
    'NOT_HELD',
    `${method.replace('_', ' ')} refused: ${why}. Nothing was sent. Stop here: your work so far is kept, and the host that holds the issue resumes you`,
  );
  // Not logged: its op log may be another host's now.
  AUDITED.add(err);
  throw err;
}

/** Errors whose outcome line `audited` already wrote. */
const AUDITED = new WeakSet<object>();

function headOf(ctx: MethodContext) {
  return { opLogHead: ctx.opLog.head.hash, opLogSeq: ctx.opLog.head.seq };
}

/** Push the workspace's HEAD to the bottle's branch, as its own audited write. */
async function push(ctx: MethodContext): Promise<{ sha: string }> {
  const remote = ctx.forge.gitRemote();
  if (!remote) throw new BbError('FORGE_ERROR', 'this forge cannot push branches');
  // Read (as data) and checked before anything is logged or sent.
  const sha = await ctx.git.receive();
  await audited(
    ctx,
    'push',
    {
      target: `branch ${ctx.branch}`,
      intent: `push ${sha.slice(0, 12)} to ${ctx.branch}`,
      done: () => `pushed ${ctx.branch} at ${sha.slice(0, 12)}`,
      relay: { sha },
    },
    () => pushCommit(ctx.git, remote, sha, ctx.branch),
  );
  ctx.queue.write('op', { method: 'push', seq: ctx.opLog.head.seq, sha }, { sync: true });
  return { sha };
}

interface Answer {
  result: unknown;
  /** What the op-log line of a read says. */
  read?: { target: string; summary: string };
}

async function run(ctx: MethodContext, method: MethodName, params: unknown): Promise<Answer> {
  const f = ctx.forge;
  const p = parse(method, params);
  if (WRITE_METHODS.has(method)) {
    assertOpen(ctx, method);
    // Text a person reads on the thread: nothing of it may pass for the orchestrator's.
    const q = p as { body?: unknown; title?: unknown };
    for (const text of [q.title, q.body]) {
      const what = typeof text === 'string' ? hostOnlyText(text) : undefined;
      if (what)
        throw new BbError(
          'INVALID_INPUT',
          `${method} refused: the text contains ${what}, which only bot-bottle itself writes on a thread; leave it out`,
        );
    }
  }
  switch (method) {
    case 'read_issue': {
      const n = (p as { number: number }).number;
      return {
        result: await f.readIssue(n),
        read: { target: `#${n}`, summary: `read issue #${n}` },
      };
    }
    case 'read_pr': {
      const n = (p as { number: number }).number;
      return { result: await f.readPr(n), read: { target: `#${n}`, summary: `read PR #${n}` } };
    }
    case 'read_comments': {
      const n = (p as { number: number }).number;
      const comments = await f.readComments(n);
      return {
        result: comments,
        read: { target: `#${n}`, summary: `read ${comments.length} comments of #${n}` },
      };
    }
    case 'read_reviews': {
      const n = (p as { number: number }).number;
      const reviews = await f.readReviews(n);
      // Each review with its inline comments: what a reviewer said, where.
      const result = [];
      for (const r of reviews) result.push({ ...r, comments: await f.readReviewComments(n, r.id) });
      const inline = result.reduce((k, r) => k + r.comments.length, 0);
      return {
        result,
        read: {
          target: `#${n}`,
          summary: `read ${reviews.length} reviews of #${n} (${inline} inline comments)`,
        },
      };
    }
    case 'post_comment': {
      const { number: n, body: text } = p as z.infer<typeof PARAMS.post_comment>;
      f.checkWrite('postComment', n);
      const c = await audited(
        ctx,
        method,
        {
          target: `#${n}`,
          intent: `post a comment to #${n} (${text.length} chars)`,
          done: () => `posted comment to #${n} (${text.length} chars)`,
        },
        () => f.postComment(n, text),
      );
      ctx.queue.write(
        'op',
        { method, seq: ctx.opLog.head.seq, commentId: c.id, number: n },
        { sync: true },
      );
      return { result: c };
    }
    case 'update_description': {
      const { number: n, body: text } = p as z.infer<typeof PARAMS.update_description>;
      f.checkWrite('updateDescription', n);
      await audited(
        ctx,
        method,
        {
          target: `#${n}`,
          intent: `update the description of #${n}`,
          done: () => `updated the description of #${n}`,
        },
        () => f.updateDescription(n, text),
      );
      ctx.queue.write('op', { method, seq: ctx.opLog.head.seq, number: n }, { sync: true });
      return { result: { ok: true } };
    }
    case 'open_pr': {
      const input = p as z.infer<typeof PARAMS.open_pr>;
      // Everything about the PR is checked before the branch is pushed.
      f.checkWrite('openPr', ctx.branch);
      const remote = f.gitRemote();
      if (!remote) throw new BbError('FORGE_ERROR', 'this forge cannot push branches');
      const { sha } = await push(ctx);
      const base = input.base ?? (await remoteDefaultBranch(ctx.git, remote)) ?? 'main';
      const pr = await audited(
        ctx,
        method,
        {
          target: `branch ${ctx.branch}`,
          intent: `open a PR from ${ctx.branch} into ${base}`,
          done: (r) =>
            `opened PR #${r.number} from ${ctx.branch} into ${base} at ${sha.slice(0, 7)}`,
        },
        () => f.openPr({ head: ctx.branch, base, title: input.title, body: input.body }),
      );
      ctx.queue.write(
        'op',
        { method, seq: ctx.opLog.head.seq, prNumber: pr.number, sha, base },
        { sync: true },
      );
      return { result: pr };
    }
    case 'push':
      return { result: await push(ctx) };
    case 'signal_done': {
      const signal = p as DoneSignal;
      assertOpen(ctx, method);
      // The done signal is itself audited: logged and relayed durably before it counts.
      ctx.opLog.append(
        {
          method,
          target: `#${f.issue}`,
          outcome: 'ok',
          summary: `signalled done: ${signal.status}`,
        },
        { sync: true },
      );
      ctx.queue.write('done', { status: signal.status, summary: signal.summary }, { sync: true });
      ctx.done = { ...signal, turn: ctx.turn() };
      ctx.checkins.now({ method, outcome: 'ok', ...headOf(ctx) });
      return { result: { ok: true } };
    }
  }
}

function targetOf(params: unknown, ctx: MethodContext): string {
  const n = (params as { number?: unknown } | undefined)?.number;
  if (typeof n === 'number' && Number.isSafeInteger(n)) return `#${n}`;
  return n === undefined ? `#${ctx.forge.issue}` : `(${typeof n})`;
}

/**
 * Run one method: check its params (and, for writes, that the turn is not done
 * and the target is in scope), then call the forge. Every call leaves op-log
 * lines: a read one after it; a write one flushed before its request (no line,
 * no request) and one with its outcome. A refused call makes no forge request.
 */
export async function callMethod(
  ctx: MethodContext,
  method: MethodName,
  params: unknown,
): Promise<unknown> {
  let answer: Answer;
  try {
    assertHeld(ctx, method);
    answer = await run(ctx, method, params);
  } catch (err) {
    // Writes logged their own outcome once started; everything refused or failed before is logged here.
    if (!(typeof err === 'object' && err !== null && AUDITED.has(err))) {
      const outcome = outcomeOf(err);
      const target = targetOf(params, ctx);
      const verb = method.replace('_', ' ');
      try {
        ctx.opLog.append({
          method,
          target,
          outcome: outcome === 'unknown' ? 'error' : outcome,
          reason: errorMessage(err),
          summary: `${outcome === 'rejected' ? 'refused' : 'failed'} ${verb} on ${target}`,
        });
        ctx.checkins.checkin({ method, outcome, ...headOf(ctx) });
      } catch {
        // The log itself is what failed: the call already made no request.
      }
    }
    throw err;
  }
  if (answer.read) {
    ctx.opLog.append({
      method,
      target: answer.read.target,
      outcome: 'ok',
      summary: answer.read.summary,
    });
    ctx.checkins.checkin({ method, outcome: 'ok', ...headOf(ctx) });
  }
  return answer.result;
}
