import { readFileSync } from 'node:fs';
import {
  type ClientRequest,
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { BbError, registerSecret } from '@bb/errors';
import { z } from 'zod';
import { denialBody } from './denial';
import { withoutHopByHop } from './headers';
import { type EgressLogger, type LogTicket, plainTicket } from './log';
import { redactHeaders, SecretRedactor } from './redactor';
import { type ModelUsage, UsageMeter } from './usage-meter';

const RouteSchema = z
  .object({
    prefix: z.string().regex(/^\/[a-z0-9._-]+$/, 'must be a path prefix such as /anthropic'),
    upstream: z.url('must be the upstream base URL'),
    headers: z.record(
      z.string(),
      z
        .string()
        .regex(
          /^(env:[A-Z_][A-Z0-9_]*|file:\/\S+)$/,
          'must reference a secret as env:NAME or file:/path',
        ),
    ),
  })
  .strict();
export const RoutesFileSchema = z.object({ routes: z.array(RouteSchema) }).strict();

/** A route with its secrets resolved (held only in this process). */
export interface CredentialRoute {
  prefix: string;
  upstream: URL;
  headers: Record<string, string>;
}

// Headers a client might use to pass (or smuggle) its own credentials.
const CLIENT_AUTH = [
  'authorization',
  'proxy-authorization',
  'x-api-key',
  'api-key',
  'cookie',
  'x-goog-api-key',
];

/**
 * Read a routes file and resolve each secret reference. Throws INVALID_INPUT
 * naming the file and the problem; never includes a secret's value. With
 * `secretsOnly`, a `file:/path` reference is not read from the filesystem but
 * looked up in `env` under its whole reference (`file:/path`), as a bottle's
 * gate gets it from the host.
 */
export function loadRoutes(
  path: string,
  env: Record<string, string | undefined> = process.env,
  options: { secretsOnly?: boolean } = {},
): CredentialRoute[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `routes file ${path} cannot be read as JSON: ${(err as Error).message}`,
    );
  }
  const parsed = RoutesFileSchema.safeParse(raw);
  if (!parsed.success) {
    throw new BbError(
      'INVALID_INPUT',
      `routes file ${path} is invalid: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  }
  return parsed.data.routes.map((r) => {
    const headers: Record<string, string> = {};
    for (const [name, ref] of Object.entries(r.headers)) {
      let value: string | undefined;
      if (ref.startsWith('env:')) value = env[ref.slice(4)];
      else if (options.secretsOnly) value = env[ref];
      else {
        try {
          value = readFileSync(ref.slice(5), 'utf8').trim();
        } catch {
          value = undefined;
        }
      }
      if (!value)
        throw new BbError(
          'INVALID_INPUT',
          `routes file ${path}: the secret ${ref} for ${r.prefix} (${name}) is not set`,
        );
      registerSecret(value);
      headers[name.toLowerCase()] = value;
    }
    return { prefix: r.prefix, upstream: new URL(r.upstream), headers };
  });
}

/**
 * Why a request path could leave its route's base, or undefined when it is a
 * plain path: no dot segments (plain or percent-encoded), no encoded slash or
 * backslash, no backslash, no empty segment.
 */
export function unsafePath(url: string): string | undefined {
  const path = url.split('?')[0]!;
  if (!path.startsWith('/')) return 'the path must start with /';
  if (path.includes('\\')) return 'a backslash in the path';
  if (/%(2f|5c)/i.test(path)) return 'an encoded slash in the path';
  if (
    path
      .slice(1)
      .split('/')
      .some((seg, i, all) => seg === '' && i < all.length - 1)
  )
    return 'an empty path segment';
  for (const seg of path.split('/')) {
    let d: string;
    try {
      d = decodeURIComponent(seg);
    } catch {
      return 'a malformed escape in the path';
    }
    if (d === '.' || d === '..') return 'a dot segment in the path';
  }
  return undefined;
}

const withUsage = (usage: ModelUsage | undefined) => (usage ? { usage } : {});

export interface CredentialProxy {
  server: Server;
  /** Swap routes atomically; requests in flight finish on the old ones. */
  reload(routes: CredentialRoute[]): void;
  close(): Promise<void>;
}

/** How long an answer whose client hung up is still read, to count what it used. */
const DRAIN_MS = 10 * 60_000;

/** Pipelined requests on one connection that may wait for their turn; past this it is closed. */
const MAX_QUEUED = 16;

/**
 * A reverse proxy that adds credentials the agent never sees: a request to
 * `<prefix>/rest` goes to `<upstream>/rest` with the route's headers, after any
 * client-supplied auth header is removed. Logged with the route and the names of
 * the injected headers, never their values.
 */
export function createCredentialProxy(options: {
  routes: CredentialRoute[];
  log?: EgressLogger;
  /** Whether requests can still be logged; when not, they are refused (fail closed). */
  canLog?: () => boolean;
  /** Hold room in the log for an allowed request's line (see `EgressProxyOptions.reserve`). */
  reserve?: () => LogTicket;
  /** Read each model answer's usage into its log line. @default true (off only to measure what it costs) */
  meter?: boolean;
}): CredentialProxy {
  let routes = options.routes;
  // Requests upstream not ended yet (a closing proxy ends them).
  const inFlight = new Set<ClientRequest>();
  const log = options.log ?? (() => {});
  // node:http hands pipelined requests over at once; each goes upstream only when the
  // one before it on its connection has ended, so no key is spent on a request whose
  // answer could never be read, and at most MAX_QUEUED wait their turn.
  const turns = new WeakMap<Socket, { busy: boolean; waiting: Array<() => void> }>();
  const inTurn = (req: IncomingMessage, res: ServerResponse, handle: () => void) => {
    const socket = req.socket;
    const t = turns.get(socket) ?? { busy: false, waiting: [] };
    turns.set(socket, t);
    const go = () => {
      // Its connection is gone: nothing of it or behind it goes upstream.
      if (socket.destroyed) {
        t.waiting.length = 0;
        t.busy = false;
        return;
      }
      t.busy = true;
      res.once('close', () => {
        const next = t.waiting.shift();
        if (next) next();
        else t.busy = false;
      });
      handle();
    };
    if (!t.busy) go();
    else if (t.waiting.length >= MAX_QUEUED) socket.destroy();
    else t.waiting.push(go);
  };
  const server = createServer(
    { maxHeaderSize: 32768, connectionsCheckingInterval: 1000 },
    (req: IncomingMessage, res: ServerResponse) => inTurn(req, res, () => handle(req, res)),
  );
  function handle(req: IncomingMessage, res: ServerResponse): void {
    const started = Date.now();
    const current = routes;
    const path = req.url ?? '/';
    if (options.canLog && !options.canLog()) {
      res
        .writeHead(503, { 'content-type': 'text/plain' })
        .end('the proxy log is full: no more credentialed requests from this bottle\n');
      return;
    }
    const bad = unsafePath(path);
    if (bad) {
      res
        .writeHead(400, { 'content-type': 'text/plain' })
        .end(`refused: ${bad}; a credential route takes only plain paths below its prefix\n`);
      return;
    }
    const route = current.find(
      (r) =>
        path === r.prefix || path.startsWith(`${r.prefix}/`) || path.startsWith(`${r.prefix}?`),
    );
    if (!route) {
      const reason = `routes: ${current.map((r) => r.prefix).join(', ') || 'none'}`;
      log({
        time: new Date().toISOString(),
        kind: 'credential',
        host: '',
        port: 0,
        decision: 'denied',
        rule: reason,
        route: path.split('?')[0]!.split('/').slice(0, 2).join('/'),
        method: req.method,
        bytesUp: 0,
        bytesDown: 0,
        durationMs: 0,
      });
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(denialBody('credential', { path: path.split('?')[0]! }, reason));
      return;
    }
    const rest = path.slice(route.prefix.length) || '/';
    // Batches and stored files make answers that never pass back through here, so their
    // usage could not be counted against the bottle's budget: not through a credential route.
    if (/\/(batches|files)(\/|$|\?)/.test(rest.split('?')[0]!)) {
      res
        .writeHead(403, { 'content-type': 'text/plain' })
        .end(
          `refused: ${route.prefix}${rest.split('?')[0]} makes answers whose usage the bottle cannot count (batches, files); ask the model directly instead\n`,
        );
      return;
    }
    const base = route.upstream.pathname.replace(/\/$/, '');
    // Hop-by-hop headers (and those Connection names) stop here.
    const headers = withoutHopByHop(req.headers);
    for (const h of CLIENT_AUTH) delete headers[h];
    for (const h of Object.keys(route.headers)) delete headers[h];
    delete headers['host'];
    // Plain bodies, so a key the upstream echoes back can be found and removed.
    Object.assign(headers, route.headers, {
      host: route.upstream.host,
      'accept-encoding': 'identity',
    });
    const secrets = Object.values(route.headers);
    const port = Number(route.upstream.port || (route.upstream.protocol === 'https:' ? 443 : 80));
    const send = route.upstream.protocol === 'https:' ? httpsRequest : httpRequest;
    let up = 0;
    let down = 0;
    let status: number | undefined;
    // What the model's answer says it used (the upstream's word, not the agent's).
    let meter: UsageMeter | undefined;
    // Room for this request's line is held from now: what was allowed is always logged,
    // once, when its exchange ends however it ends (answered, failed, cut off, or its
    // connection gone first).
    const ticket = options.reserve?.() ?? plainTicket(log);
    const logged = () =>
      ticket({
        time: new Date().toISOString(),
        kind: 'credential',
        host: route.upstream.hostname,
        port,
        decision: 'allowed',
        rule: route.prefix,
        route: route.prefix,
        auth: Object.keys(route.headers),
        method: req.method,
        ...(status === undefined ? {} : { status }),
        ...withUsage(
          meter?.result({
            up,
            down,
            generated:
              req.method === 'POST' && status !== undefined && status < 300 && status >= 200,
          }),
        ),
        bytesUp: up,
        bytesDown: down,
        durationMs: Date.now() - started,
      });
    req.on('data', (c: Buffer) => (up += c.length));
    // The exchange is logged when the upstream's side of it ends, not the client's: an
    // agent that hangs up on an answer does not stop the model making it (or billing it),
    // so the answer is read to its end (within DRAIN_MS) and counted all the same.
    let ures: IncomingMessage | undefined;
    let over = false;
    const finished = () => {
      if (over) return;
      over = true;
      clearTimeout(drain);
      inFlight.delete(upstream);
      logged();
    };
    let drain: NodeJS.Timeout | undefined;
    res.once('close', () => {
      if (over) return;
      // Only a model's answer (a POST, answered or not yet) is worth reading on; the rest ends here.
      const answering = req.method === 'POST' && (!ures || (status !== undefined && status < 300));
      if (!answering) {
        finished();
        return;
      }
      if (ures) {
        ures.unpipe();
        ures.resume();
      }
      drain = setTimeout(() => upstream.destroy(), DRAIN_MS);
      drain.unref();
    });
    const upstream = send(
      {
        host: route.upstream.hostname,
        port,
        method: req.method,
        path: `${base}${rest}`,
        headers,
      },
      (answer) => {
        ures = answer;
        status = answer.statusCode;
        const m =
          options.meter === false ? undefined : new UsageMeter(answer.headers['content-type']);
        meter = m;
        answer.on('data', (c: Buffer) => {
          down += c.length;
          m?.feed(c);
        });
        answer.once('close', () => {
          // An answer the upstream cut off is cut off for the client too (a pipe would leave it waiting).
          if (!answer.complete) res.destroy();
          finished();
        });
        if (res.destroyed) {
          // The client is gone already: the answer is read for its count alone.
          answer.resume();
          return;
        }
        // The body may shrink or grow where a key is redacted: no content-length.
        const out = withoutHopByHop(answer.headers);
        delete out['content-length'];
        res.writeHead(answer.statusCode ?? 502, redactHeaders(out, secrets));
        answer.pipe(new SecretRedactor(secrets)).pipe(res);
      },
    );
    inFlight.add(upstream);
    upstream.on('error', (err) => {
      if (!res.headersSent && !res.destroyed)
        res
          .writeHead(502, { 'content-type': 'text/plain' })
          .end(`upstream for ${route.prefix} failed: ${err.message}\n`);
      else res.destroy();
      finished();
    });
    upstream.on('close', () => {
      if (!ures) finished();
    });
    req.pipe(upstream);
  }
  server.headersTimeout = 10_000;
  return {
    server,
    reload(next) {
      routes = next;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const u of inFlight) u.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
