import { timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';

/**
 * Who may use the dashboard and the APIs (`/`, `/api/*`): the webhook needs
 * none of this (its signature is its authentication), and `/healthz` says only
 * that the service is up.
 *
 * - With an operator token (`BB_API_TOKEN`), a request must carry it:
 *   `Authorization: Bearer <token>`, or the `bb_api_token` cookie that visiting
 *   `/?token=<token>` sets for a browser.
 * - Without one, they answer only when the service listens on loopback; on any
 *   other address they answer 403 and say to set the token.
 */
export interface AccessPolicy {
  token?: string | undefined;
  /** Whether the listener is on a loopback address only. */
  loopback: boolean;
  /**
   * The operator a bearer token belongs to (their own, from `bb operator add`):
   * it lets them in on any address, and names them, so their decisions are theirs.
   */
  operator?: ((token: string) => string | undefined | Promise<string | undefined>) | undefined;
}

/** Whether a request may go on, and as which operator (null: nobody named, so it may only read). */
export type Access = { ok: true; operator: string | null } | { ok: false; response: Response };

export const TOKEN_COOKIE = 'bb_api_token';

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  return h === '::1';
}

/** The host part of a Host header (`[::1]:8080` → `::1`). */
function hostOf(header: string): string {
  const v6 = /^\[([^\]]+)\]/.exec(header);
  return v6 ? v6[1]! : header.replace(/:\d+$/, '');
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function bearer(req: Request): string | undefined {
  const m = /^Bearer\s+(\S+)$/i.exec(req.headers.get('authorization') ?? '');
  return m?.[1];
}

function presented(req: Request): string | undefined {
  const m = bearer(req);
  if (m) return m;
  for (const part of (req.headers.get('cookie') ?? '').split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === TOKEN_COOKIE) return decodeURIComponent(v.join('='));
  }
  return undefined;
}

/**
 * Undefined when the request may go on; otherwise the response to send. A
 * browser's `/?token=` visit with the right token gets the cookie and a
 * redirect to `/` (so the token leaves the address bar and the history).
 */
export async function checkAccess(
  req: Request,
  policy: AccessPolicy,
): Promise<Response | undefined> {
  const a = await authenticate(req, policy);
  return a.ok ? undefined : a.response;
}

/**
 * `checkAccess`, and who is asking: an operator's own token (in the
 * `Authorization` header only, never a cookie, so no other site can decide in a
 * browser's name) is let in on any address and names its operator. A token that
 * looks like an operator's and is not one (wrong, revoked) is refused, on loopback too.
 */
export async function authenticate(req: Request, policy: AccessPolicy): Promise<Access> {
  const token = bearer(req);
  if (token && policy.operator) {
    const name = await policy.operator(token);
    if (name) return { ok: true, operator: name };
    if (token.startsWith('bbop_'))
      return {
        ok: false,
        response: new Response(
          "this operator token is not valid (wrong, or revoked): bb operator list on the orchestrator's host\n",
          {
            status: 401,
            headers: {
              'content-type': 'text/plain',
              'www-authenticate': 'Bearer realm="bot-bottle"',
            },
          },
        ),
      };
  }
  const refused = sharedAccess(req, policy);
  return refused ? { ok: false, response: refused } : { ok: true, operator: null };
}

function sharedAccess(req: Request, policy: AccessPolicy): Response | undefined {
  const url = new URL(req.url);
  if (!policy.token) {
    // A page elsewhere could rebind its own name to 127.0.0.1: only loopback names pass.
    if (policy.loopback && isLoopbackHost(hostOf(req.headers.get('host') ?? url.host)))
      return undefined;
    if (policy.loopback)
      return text(
        403,
        'the dashboard answers only to a loopback Host (127.0.0.1, localhost, [::1])\n',
      );
    return text(
      403,
      "the dashboard and the APIs are closed on a non-loopback address: set BB_API_TOKEN on the orchestrator and send it, or an operator's own token (bb operator add NAME), as a bearer token\n",
    );
  }
  const query = url.searchParams.get('token');
  if (url.pathname === '/' && query !== null && same(query, policy.token))
    return new Response(null, {
      status: 303,
      headers: {
        location: '/',
        'set-cookie': `${TOKEN_COOKIE}=${encodeURIComponent(policy.token)}; HttpOnly; SameSite=Strict; Path=/`,
      },
    });
  const got = presented(req);
  if (got !== undefined && same(got, policy.token)) return undefined;
  return new Response('an operator token is required: Authorization: Bearer <BB_API_TOKEN>\n', {
    status: 401,
    headers: { 'content-type': 'text/plain', 'www-authenticate': 'Bearer realm="bot-bottle"' },
  });
}

function text(status: number, body: string): Response {
  return new Response(body, { status, headers: { 'content-type': 'text/plain' } });
}
