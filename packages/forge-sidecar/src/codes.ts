import { BB_ERROR_CODES, BbError, type BbErrorCode, isBbError } from '@bb/errors';

/** The wire form of an error: `{ code, message, data: { code, kind, details } }`. */
export interface WireError {
  code: number;
  message: string;
  data?: { code: string; kind: string; details?: unknown };
}

/**
 * The one table from string codes to JSON-RPC numbers. Standard errors use
 * -32700..-32603; ours use -32000..-32099. Anything not listed here goes out as
 * -32603 "Internal error" and is logged in full on the server only.
 */
export const ERROR_TABLE = {
  PARSE_ERROR: { wire: -32700, kind: 'parse_error' },
  INVALID_REQUEST: { wire: -32600, kind: 'invalid_request' },
  METHOD_NOT_FOUND: { wire: -32601, kind: 'method_not_found' },
  INVALID_INPUT: { wire: -32602, kind: 'invalid_params' },
  INTERNAL: { wire: -32603, kind: 'internal' },
  SCOPE_DENIED: { wire: -32001, kind: 'scope_denied' },
  NOT_FOUND: { wire: -32002, kind: 'not_found' },
  FORGE_UNAVAILABLE: { wire: -32003, kind: 'forge_unavailable' },
  CONFLICT: { wire: -32004, kind: 'conflict' },
  UNAUTHORIZED: { wire: -32005, kind: 'forge_unauthorized' },
  FORBIDDEN: { wire: -32006, kind: 'forge_forbidden' },
  FORGE_ERROR: { wire: -32007, kind: 'forge_error' },
  PUSH_FAILED: { wire: -32008, kind: 'push_failed' },
  ALREADY_DONE: { wire: -32009, kind: 'already_done' },
  OUTCOME_UNKNOWN: { wire: -32010, kind: 'outcome_unknown' },
  AUDIT_UNAVAILABLE: { wire: -32011, kind: 'audit_unavailable' },
  // A gate's platform cannot do what was asked (a supervise kind it cannot apply).
  UNSUPPORTED: { wire: -32012, kind: 'unsupported' },
  // Fencing: the host that runs this bottle has not renewed its hold on the issue.
  NOT_HELD: { wire: -32013, kind: 'not_held' },
} as const satisfies Partial<Record<BbErrorCode, { wire: number; kind: string }>>;

export type WireCode = keyof typeof ERROR_TABLE;

/** Map any thrown value to a wire error. Unknown errors reveal nothing. */
export function toWireError(err: unknown): { wire: WireError; internal: boolean } {
  if (isBbError(err) && Object.hasOwn(ERROR_TABLE, err.code) && err.code !== 'INTERNAL') {
    const entry = ERROR_TABLE[err.code as WireCode];
    return {
      wire: {
        code: entry.wire,
        message: err.message,
        data: { code: err.code, kind: entry.kind, details: err.data },
      },
      internal: false,
    };
  }
  return {
    wire: { code: -32603, message: 'Internal error', data: { code: 'INTERNAL', kind: 'internal' } },
    internal: true,
  };
}

/** Rebuild the typed error a server sent. */
export function fromWireError(e: WireError): BbError {
  // A code this build does not know is the server's defect to report, not a new code.
  const said = e.data?.code;
  const code =
    said !== undefined && Object.hasOwn(BB_ERROR_CODES, said)
      ? (said as BbErrorCode)
      : codeOfNumber(e.code);
  return new BbError(code, e.message, {
    data: { wireCode: e.code, kind: e.data?.kind, details: e.data?.details },
  });
}

function codeOfNumber(n: number): BbErrorCode {
  for (const [code, entry] of Object.entries(ERROR_TABLE))
    if (entry.wire === n) return code as WireCode;
  return 'INTERNAL';
}
