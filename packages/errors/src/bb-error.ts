import { redactString } from './redact';

/**
 * The string codes bot-bottle packages use. Packages may use other codes too;
 * these are the ones with an agreed meaning across packages (and, for the forge
 * sidecar, an agreed JSON-RPC number).
 */
export type BbErrorCode =
  | 'INVALID_INPUT'
  | 'NOT_FOUND'
  | 'CONFLICT'
  | 'SCOPE_DENIED'
  | 'FORGE_UNAVAILABLE'
  | 'FORGE_ERROR'
  | 'UNAUTHORIZED'
  | 'STATE_CORRUPT'
  | 'STATE_TOO_NEW'
  | 'STATE_UNWRITABLE'
  | 'STATE_BUSY'
  | 'BACKEND_UNAVAILABLE'
  | 'TIMEOUT'
  | 'INTERNAL'
  | (string & {});

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
