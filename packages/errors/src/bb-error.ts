import { redactString } from './redact';

/**
 * Every code a `BbError` may carry, each with what it means to the caller (what
 * to do about it). The list is closed: a new code is added here, with its
 * meaning, or it does not compile. The forge sidecar's wire table maps those an
 * agent may see to JSON-RPC numbers.
 */
export const BB_ERROR_CODES = {
  INVALID_INPUT: 'a value given is wrong; the message names it and what to give instead',
  NOT_FOUND: 'what was named does not exist (an issue, a bottle, an image, a file)',
  CONFLICT: 'the change collides with the current state (a slug taken, a chain moved on)',
  SCOPE_DENIED: "the write is outside the bottle's issue and its PRs",
  FORGE_UNAVAILABLE: 'the forge could not be reached or answered 5xx; try again later',
  FORGE_ERROR: 'the forge refused the request (4xx); the message says why',
  UNAUTHORIZED: "the forge does not accept the token; check the bot's token",
  FORBIDDEN: "the forge denies the token this action; check the bot's permissions",
  PUSH_FAILED: 'a git push was refused or cut short',
  ALREADY_DONE: 'the turn already signalled done; writes wait for the next turn',
  OUTCOME_UNKNOWN: 'the forge did not answer a write: read before you retry',
  AUDIT_UNAVAILABLE: 'the op log cannot be written, so nothing is sent (fail closed)',
  NOT_HELD:
    "the bottle's orchestrator no longer holds its issue (it stalled, or another took it over), so no write is sent",
  GATE_UNAVAILABLE: "a bottle's gate (its supervise sidecar) went away before it answered",
  PARSE_ERROR: 'a JSON-RPC line was not JSON',
  INVALID_REQUEST: 'a JSON-RPC request was malformed',
  METHOD_NOT_FOUND: 'the method is not one the gate serves',
  STATE_CORRUPT: 'the state database is damaged; restore it from a backup',
  STATE_TOO_NEW: 'the state database was written by a newer bot-bottle; upgrade',
  STATE_UNWRITABLE: 'the state database cannot be opened or written (disk, permissions, server)',
  STATE_BUSY: 'the state database is locked by another writer; try again',
  BACKEND_UNAVAILABLE: 'the container engine (or cluster) does not answer',
  BACKEND_ERROR: 'the container engine refused or failed an operation',
  UNSAFE_PATH: 'a path from the bottle is a link, escapes its root, or is not a plain file',
  TOO_LARGE: 'something from the bottle is over its size limit',
  TIMEOUT: 'the operation ran out of time; it may or may not have happened',
  ABORTED: 'the operation was cancelled (a shutdown, Ctrl-C)',
  UNSUPPORTED: 'this backend, forge or engine cannot do what was asked',
  OPERATOR_DENIED:
    "the orchestrator's API did not accept the operator (no token, a wrong or revoked one, or one that may not decide)",
  INTERNAL: 'a defect: the message is logged in full on the server only',
} as const;

/** The codes of {@link BB_ERROR_CODES}. */
export type BbErrorCode = keyof typeof BB_ERROR_CODES;

export interface BbErrorOptions<D> {
  cause?: unknown;
  data?: D;
}

const BB_ERROR_NAME = 'BbError';

/** The one error class of bot-bottle. Its message is redacted of registered secrets. */
export class BbError<D = Record<string, unknown>> extends Error {
  readonly code: BbErrorCode;
  readonly data: D | undefined;

  constructor(code: BbErrorCode, message: string, options: BbErrorOptions<D> = {}) {
    super(
      redactString(message),
      options.cause === undefined ? undefined : { cause: options.cause },
    );
    this.name = BB_ERROR_NAME;
    this.code = code;
    this.data = options.data;
  }

  toJSON(): { name: string; code: string; message: string; data?: D } {
    return {
      name: this.name,
      code: this.code,
      message: this.message,
      ...(this.data === undefined ? {} : { data: this.data }),
    };
  }
}

/**
 * True when `err` is a BbError (from any copy of this package), optionally with
 * the given code.
 */
export function isBbError<D = Record<string, unknown>>(
  err: unknown,
  code?: BbErrorCode,
): err is BbError<D> {
  if (typeof err !== 'object' || err === null) return false;
  const e = err as { name?: unknown; code?: unknown };
  if (e.name !== BB_ERROR_NAME || typeof e.code !== 'string') return false;
  return code === undefined || e.code === code;
}

/**
 * How `p` settles, as a word a test can compare: `resolved`, the `BbError` code it
 * was rejected with, or `not a BbError: …` for anything else thrown.
 */
export async function settledCode(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return isBbError(err) ? err.code : `not a BbError: ${String(err)}`;
  }
  return 'resolved';
}

/** The message of anything thrown, redacted. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return redactString(err.message);
  return redactString(String(err));
}
