import { BbError, type BbErrorCode, errorMessage, isBbError } from '@bb/errors';
import { isName } from '@bb/names';
import { jsonText } from '@bb/wall';
import { z } from 'zod';
import {
  FINAL_STATUSES,
  MAX_FILE_BYTES,
  MAX_JUSTIFICATION,
  REQUEST_ID,
  type RequestStatus,
} from './contract';
import type { SuperviseDesk } from './desk';
import { type DeskPort, localDesk } from './port';

/** Where the API lives on the orchestrator. */
export const SUPERVISE_API = '/api/supervise';

/** Who is calling: the name the orchestrator knows an operator's token by, or nobody in particular. */
export interface ApiCaller {
  /** Set for a request that carried a named operator token; decisions need one. */
  operator: string | null;
}

const hashPrefix = z
  .string()
  .regex(/^[0-9a-f]{8,64}$/, 'a sha256 hash (or its first 8 or more hex digits)');

/** `POST …/requests/<id>/approve` */
export const ApproveBody = z
  .object({
    // `manifest` writes a file on the orchestrator's host: decided there (bb supervise approve).
    scope: z.enum(['turn', 'bottle']).optional(),
    /** Your own version of the file instead of the proposal (the request ends `modified`). */
    file: z.string().min(1).max(MAX_FILE_BYTES).optional(),
    /** The hashes of the files you were shown: anything else is not decided. */
    expect: z.object({ baseHash: hashPrefix, candidateHash: hashPrefix }).partial().optional(),
    override: z.boolean().optional(),
  })
  .strict();
/** `POST …/requests/<id>/reject` */
export const RejectBody = z
  .object({ reason: z.string().trim().min(1).max(MAX_JUSTIFICATION) })
  .strict();
/** `PUT …/bottles/<slug>/routes` and `…/allowlist` */
export const EditBody = z
  .object({
    file: z.string().min(1).max(MAX_FILE_BYTES),
    scope: z.enum(['turn', 'bottle']).optional(),
    /** Past the operator's ceiling, knowingly. */
    override: z.boolean().optional(),
  })
  .strict();

const MAX_BODY = 256 * 1024;

const STATUS_OF: Partial<Record<BbErrorCode, number>> = {
  INVALID_INPUT: 400,
  OPERATOR_DENIED: 403,
  SCOPE_DENIED: 403,
  NOT_FOUND: 404,
  CONFLICT: 409,
  TOO_LARGE: 413,
  UNSUPPORTED: 501,
};

const json = (status: number, v: unknown) =>
  new Response(`${jsonText(v, 2)}\n`, {
    status,
    headers: { 'content-type': 'application/json', 'cache-control': 'no-store' },
  });

/** An error as the API answers it, `{ error: { code, message, data? } }`, and its HTTP status. */
function failure(err: unknown, log?: (e: Record<string, unknown>) => void): Response {
  if (isBbError(err)) {
    const status = STATUS_OF[err.code] ?? 500;
    return json(status, {
      error: {
        code: status === 500 ? 'INTERNAL' : err.code,
        message: errorMessage(err),
        ...(err.data ? { data: err.data } : {}),
      },
    });
  }
  log?.({ msg: 'supervise API call failed', error: errorMessage(err) });
  return json(500, {
    error: { code: 'INTERNAL', message: 'the orchestrator failed; see its log' },
  });
}

async function body<T>(req: Request, schema: z.ZodType<T>): Promise<T> {
  // Only JSON: a browser cannot send it across sites without asking first.
  if (!/^application\/json\b/i.test(req.headers.get('content-type') ?? ''))
    throw new BbError('INVALID_INPUT', 'send the body as JSON (content-type: application/json)');
  const text = await req.text();
  if (Buffer.byteLength(text) > MAX_BODY)
    throw new BbError('TOO_LARGE', `the body is larger than ${MAX_BODY} bytes`);
  let v: unknown;
  try {
    v = text.trim() ? JSON.parse(text) : {};
  } catch {
    throw new BbError('INVALID_INPUT', 'the body is not JSON');
  }
  const r = schema.safeParse(v);
  if (!r.success)
    throw new BbError(
      'INVALID_INPUT',
      `the body is not what this call takes: ${r.error.issues.map((i) => `${i.path.join('.') || 'body'}: ${i.message}`).join('; ')}`,
    );
  return r.data;
}

const ROUTES: Array<{
  method: string;
  path: RegExp;
  decides: boolean;
  run: (port: DeskPort, m: string[], req: Request) => Promise<unknown>;
}> = [
  {
    method: 'GET',
    path: /^\/requests$/,
    decides: false,
    run: (port, _m, req) => {
      const q = new URL(req.url).searchParams;
      const status = q.get('status');
      if (
        status !== null &&
        status !== 'pending' &&
        !FINAL_STATUSES.includes(status as RequestStatus)
      )
        throw new BbError(
          'INVALID_INPUT',
          `status must be pending or one of ${FINAL_STATUSES.join(', ')} (got ${JSON.stringify(status)})`,
        );
      const slug = q.get('slug');
      return port
        .list({
          ...(q.get('all') === '1' ? {} : { status: (status ?? 'pending') as RequestStatus }),
          ...(slug ? { slug } : {}),
        })
        .then((requests) => ({ requests }));
    },
  },
  { method: 'GET', path: /^\/requests\/([^/]+)$/, decides: false, run: (p, m) => p.show(m[0]!) },
  {
    method: 'POST',
    path: /^\/requests\/([^/]+)\/approve$/,
    decides: true,
    run: async (port, m, req) => {
      const b = await body(req, ApproveBody);
      return port.approve(m[0]!, {
        ...(b.scope ? { scope: b.scope } : {}),
        edited: b.file,
        expect: b.expect,
        override: !!b.override,
      });
    },
  },
  {
    method: 'POST',
    path: /^\/requests\/([^/]+)\/reject$/,
    decides: true,
    run: async (port, m, req) => port.reject(m[0]!, (await body(req, RejectBody)).reason),
  },
  {
    method: 'POST',
    path: /^\/requests\/([^/]+)\/cancel$/,
    decides: true,
    run: (port, m) => port.cancel(m[0]!),
  },
  {
    method: 'GET',
    path: /^\/bottles\/([^/]+)\/(routes|allowlist)$/,
    decides: false,
    run: async (port, m) => ({ file: await port.current(m[0]!, m[1] as 'routes' | 'allowlist') }),
  },
  {
    method: 'PUT',
    path: /^\/bottles\/([^/]+)\/(routes|allowlist)$/,
    decides: true,
    run: async (port, m, req) => {
      const b = await body(req, EditBody);
      return port.edit(m[0]!, m[1] as 'routes' | 'allowlist', b.file, b.scope ?? 'bottle', {
        override: !!b.override,
      });
    },
  },
];

/**
 * The operator's desk over HTTP, under `/api/supervise/`: list and show requests,
 * approve (or modify), reject and cancel them, read and change a bottle's routes
 * and allowlist. Reading is for anyone the orchestrator lets in (see its access
 * policy); every decision needs a named operator's token, and is recorded as
 * decided by that name through `api`. Answers `undefined` for paths it does not serve.
 */
export function createSuperviseApi(
  desk: SuperviseDesk,
  options: { log?: (e: Record<string, unknown>) => void } = {},
) {
  return async (req: Request, caller: ApiCaller): Promise<Response | undefined> => {
    const { pathname } = new URL(req.url);
    if (!pathname.startsWith(`${SUPERVISE_API}/`)) return undefined;
    const rest = pathname.slice(SUPERVISE_API.length);
    const paths = ROUTES.filter((r) => r.path.test(rest));
    if (!paths.length) return undefined;
    const route = paths.find((r) => r.method === req.method);
    if (!route)
      return json(405, {
        error: { code: 'INVALID_INPUT', message: `${req.method} is not served at ${pathname}` },
      });
    try {
      const m = (route.path.exec(rest) ?? []).slice(1).map(decodeURIComponent);
      const [first] = m;
      if (first !== undefined && rest.startsWith('/requests/') && !REQUEST_ID.test(first))
        throw new BbError('INVALID_INPUT', `${JSON.stringify(first)} is not a request id (sr_…)`);
      if (first !== undefined && rest.startsWith('/bottles/') && !isName(first))
        throw new BbError('INVALID_INPUT', `${JSON.stringify(first)} is not a bottle's name`);
      if (route.decides && !caller.operator)
        throw new BbError(
          'OPERATOR_DENIED',
          "deciding over the API needs an operator's own token (the shared BB_API_TOKEN only reads): on the orchestrator's host, bb operator add NAME prints one",
        );
      const port = localDesk(desk, { by: caller.operator ?? 'anonymous', via: 'api' });
      return json(200, await route.run(port, m, req));
    } catch (err) {
      return failure(err, options.log);
    }
  };
}
