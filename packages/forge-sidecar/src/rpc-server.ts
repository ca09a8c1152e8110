/**
 * JSON-RPC 2.0 on a Unix socket, for both of a bottle's gates (the forge sidecar
 * and the supervise sidecar): one socket, two ways in. A connection whose first
 * byte opens JSON speaks newline-delimited JSON-RPC (the clients' way: no HTTP
 * on either side); any other is HTTP (`POST /rpc`, and `GET /healthz` when the
 * server has a health answer). Only the methods it is given are served, by their
 * own names (a `Map`: nothing an object inherits answers). A call is told, by
 * its signal, when its caller went away.
 */
import { chmodSync, chownSync, lstatSync, mkdirSync, unlinkSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, createServer as createNetServer, type Socket } from 'node:net';
import { dirname } from 'node:path';
import { BbError, errorMessage } from '@bb/errors';
import { listenUnixSocket } from '@bb/wall';
import {
  JSONRPCErrorException,
  type JSONRPCRequest,
  type JSONRPCResponse,
  JSONRPCServer,
} from 'json-rpc-2.0';
import { ERROR_TABLE, toWireError } from './codes';
import { type LineConnection, serveLines } from './line-transport';

/** Where a server writes its own diagnostics (never a secret). */
export interface RpcLogger {
  info(obj: Record<string, unknown>, msg: string): void;
  warn(obj: Record<string, unknown>, msg: string): void;
  error(obj: Record<string, unknown>, msg: string): void;
}

/** One method: its params (unchecked: the method checks them) and a signal aborted when the caller goes. */
export type RpcMethod = (params: unknown, signal: AbortSignal) => unknown;

export interface RpcServerOptions {
  socketPath: string;
  /** The methods served, by name; nothing else answers. */
  methods: ReadonlyMap<string, RpcMethod>;
  /** What the server is, for its log lines: `forge sidecar`. */
  name: string;
  /** Largest request (an HTTP body or a line). */
  maxBodyBytes: number;
  /** The longest an HTTP request may take (a call that waits needs long). @default 120 s */
  requestTimeoutMs?: number;
  /** Connections served at once (more are refused until one closes). @default 64 */
  maxConnections?: number;
  /** uid/gid allowed to connect; the socket and its directory are given to them. */
  socketOwner?: { uid: number; gid: number } | undefined;
  /** @default 0o600 (0o666: its directory is 0755, so only the server's user can remove it) */
  socketMode?: number;
  /** The answer to `GET /healthz`; without it there is no such route. */
  health?: () => unknown;
  /** The most calls one batch may hold (1: batches are refused). @default 100 */
  maxBatch?: number;
  /** Each call's end: its method, and the code it failed with (`undefined`: it succeeded). */
  onCall?: (method: string, failed: string | undefined) => void;
  log: RpcLogger;
}

export interface RunningRpcServer {
  socketPath: string;
  /** Stop accepting, let calls in flight finish, remove the socket. */
  close(): Promise<void>;
}

/** A connection that sends nothing this long after it opens is closed. */
const FIRST_BYTE_MS = 10_000;

/** Serve `options.methods` on `options.socketPath` (see the module's comment). */
export async function serveRpc(options: RpcServerOptions): Promise<RunningRpcServer> {
  const { log, methods } = options;
  const maxBody = options.maxBodyBytes;
  const names = [...methods.keys()];
  const maxBatch = options.maxBatch ?? 100;
  // Aborted when the server closes: a call that waits (supervise's) stops waiting.
  const stopping = new AbortController();
  const callSignal = (caller: AbortSignal) => AbortSignal.any([caller, stopping.signal]);
  const rpc = new JSONRPCServer<{ signal: AbortSignal }>({
    errorListener: (message, data) => log.error({ err: errorMessage(data) }, message),
  });
  for (const [name, fn] of methods) {
    rpc.addMethod(name, async (params: unknown, { signal }) => {
      try {
        const result = (await fn(params, signal)) ?? null;
        options.onCall?.(name, undefined);
        return result;
      } catch (err) {
        const { wire, internal } = toWireError(err);
        if (internal)
          log.error(
            { method: name, err: errorMessage(err), stack: (err as Error).stack },
            `internal error in a ${options.name} method`,
          );
        else log.info({ method: name, code: wire.data?.code }, 'call refused or failed');
        options.onCall?.(name, wire.data?.code ?? 'INTERNAL');
        throw new JSONRPCErrorException(wire.message, wire.code, wire.data);
      }
    });
  }
  rpc.mapErrorToJSONRPCErrorResponse = (id, error) => {
    if (error instanceof JSONRPCErrorException)
      return { jsonrpc: '2.0', id, error: error.toObject() };
    return { jsonrpc: '2.0', id, error: toWireError(error).wire };
  };

  const handleOne = async (req: unknown, signal: AbortSignal): Promise<JSONRPCResponse | null> => {
    if (!isRequestShape(req)) {
      const id =
        typeof req === 'object' && req !== null && isId((req as { id?: unknown }).id)
          ? (req as { id: string | number | null }).id
          : null;
      return errorResponse(
        id,
        'INVALID_REQUEST',
        'Invalid Request: expected {"jsonrpc":"2.0","method":string,"params"?,"id"?}',
      );
    }
    if (!methods.has(req.method)) {
      if (req.id === undefined) return null;
      return errorResponse(
        req.id,
        'METHOD_NOT_FOUND',
        `Method not found: ${JSON.stringify(req.method).slice(0, 80)}; methods are ${names.join(', ')}`,
      );
    }
    const res = (await rpc.receive(req, { signal: callSignal(signal) })) as JSONRPCResponse | null;
    return req.id === undefined ? null : res;
  };

  const inFlight = new Set<Promise<unknown>>();
  const server: Server = createServer({ connectionsCheckingInterval: 2000 }, (req, res) => {
    const p = handle(req, res).catch((err) => {
      log.error({ err: errorMessage(err) }, 'request failed');
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    });
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  });
  // Slow or vanished clients must not hold the server.
  server.headersTimeout = 10_000;
  server.requestTimeout = options.requestTimeoutMs ?? 120_000;
  server.keepAliveTimeout = 5_000;
  server.on('clientError', (_err, socket) => socket.destroy());

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Closing: no new call starts (a kept connection cannot hold the close open).
    if (closingDown) {
      res.writeHead(503, { connection: 'close', 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: `the ${options.name} is stopping` }));
      return;
    }
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/healthz' && options.health)
      return json(res, 200, options.health());
    const routes = options.health ? 'POST /rpc or GET /healthz' : 'POST /rpc';
    if (path !== '/rpc') return json(res, 404, { error: `not found: use ${routes}` });
    if (req.method !== 'POST') return json(res, 405, { error: 'use POST /rpc' });
    const declared = Number(req.headers['content-length'] ?? 0);
    const tooLarge = () => {
      res.writeHead(413, { connection: 'close', 'content-type': 'application/json' });
      const msg = `request body over ${maxBody} bytes`;
      res.end(JSON.stringify(errorResponse(null, 'INVALID_REQUEST', msg)));
      req.destroy();
    };
    // Refuse a declared oversize body before reading any of it.
    if (declared > maxBody) return tooLarge();
    const raw = await readBody(req, maxBody);
    if (raw === 'too-large') return tooLarge();
    if (raw === 'aborted') return;
    let payload: unknown;
    try {
      payload = JSON.parse(raw.toString('utf8'));
    } catch {
      return json(res, 200, parseError());
    }
    // The caller is gone when its response closes before it was sent.
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    const out = await answer(payload, gone.signal);
    if (res.destroyed) return;
    return out === null ? end(res, 204) : json(res, 200, out);
  }

  /** The answer to one request or batch (either transport): none for notifications alone. */
  async function answer(
    payload: unknown,
    signal: AbortSignal,
  ): Promise<JSONRPCResponse | JSONRPCResponse[] | null> {
    if (!Array.isArray(payload)) return handleOne(payload, signal);
    if (payload.length === 0)
      return errorResponse(null, 'INVALID_REQUEST', 'Invalid Request: empty batch');
    if (payload.length > maxBatch)
      return errorResponse(
        null,
        'INVALID_REQUEST',
        maxBatch === 1
          ? 'Invalid Request: batches are not served here; send one call at a time'
          : `Invalid Request: batches hold at most ${maxBatch} calls`,
      );
    const out = (await Promise.all(payload.map((p) => handleOne(p, signal)))).filter(
      (r): r is JSONRPCResponse => r !== null,
    );
    return out.length === 0 ? null : out;
  }
  const parseError = () =>
    errorResponse(null, 'PARSE_ERROR', 'Parse error: the body is not valid JSON');

  // A connection that says nothing for 10 s is closed; at most maxConnections are open.
  const accepted = new Set<Socket>();
  const lines = new Set<LineConnection>();
  let closingDown = false;
  // The HTTP server is handed connections, never listens itself: start its checks of
  // slow requests (headersTimeout, requestTimeout) as listening would.
  server.emit('listening');
  const front = createNetServer({ allowHalfOpen: true }, (socket) => {
    accepted.add(socket);
    socket.on('close', () => accepted.delete(socket));
    socket.on('error', () => socket.destroy());
    if (closingDown) {
      socket.destroy();
      return;
    }
    socket.setTimeout(FIRST_BYTE_MS, () => socket.destroy());
    socket.once('data', (first: Buffer) => {
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(first);
      if (closingDown) socket.destroy();
      else if (first[0] === 0x7b || first[0] === 0x5b) {
        const line = serveLines(socket, {
          maxLineBytes: maxBody,
          answer,
          parseError,
          tooLarge: () =>
            errorResponse(null, 'INVALID_REQUEST', `request line over ${maxBody} bytes`),
          track: (work) => {
            inFlight.add(work);
            void work.finally(() => inFlight.delete(work));
          },
        });
        lines.add(line);
        socket.on('close', () => lines.delete(line));
      } else server.emit('connection', socket);
      socket.resume();
    });
  });
  front.maxConnections = options.maxConnections ?? 64;

  const socketMode = options.socketMode ?? 0o600;
  await prepareSocket(options.socketPath, options.socketOwner, socketMode & 0o066 ? 0o755 : 0o700);
  await listenUnixSocket(front, options.socketPath, {
    mode: socketMode,
    ...(options.socketOwner ? { owner: options.socketOwner } : {}),
  });

  let closing: Promise<void> | undefined;
  return {
    socketPath: options.socketPath,
    close: () => {
      closing ??= (async () => {
        closingDown = true;
        stopping.abort();
        const closed = new Promise<void>((r) => front.close(() => r()));
        // No new call starts: line connections read no more, idle HTTP ones go.
        for (const line of lines) line.stop();
        server.closeIdleConnections();
        // Every call started finishes (and is logged) before anything is cut.
        while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
        server.closeAllConnections();
        // Stops its checks (it never listened: the error it reports is that).
        server.close(() => {});
        for (const socket of accepted) socket.destroy();
        await closed;
        try {
          unlinkSync(options.socketPath);
        } catch {
          // already gone
        }
      })();
      return closing;
    },
  };
}

function isId(v: unknown): v is string | number | null {
  return v === null || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));
}

function isRequestShape(v: unknown): v is JSONRPCRequest {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const r = v as Record<string, unknown>;
  return (
    r['jsonrpc'] === '2.0' &&
    typeof r['method'] === 'string' &&
    (r['id'] === undefined || isId(r['id'])) &&
    (r['params'] === undefined || (typeof r['params'] === 'object' && r['params'] !== null))
  );
}

function errorResponse(
  id: string | number | null,
  code: keyof typeof ERROR_TABLE,
  message: string,
): JSONRPCResponse {
  const entry = ERROR_TABLE[code];
  return {
    jsonrpc: '2.0',
    id,
    error: { code: entry.wire, message, data: { code, kind: entry.kind } },
  };
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const text = JSON.stringify(value);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

function end(res: ServerResponse, status: number): void {
  res.writeHead(status).end();
}

function readBody(req: IncomingMessage, max: number): Promise<Buffer | 'too-large' | 'aborted'> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (c: Buffer) => {
      if (done) return;
      size += c.length;
      if (size > max) {
        done = true;
        resolve('too-large');
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (!done) {
        done = true;
        resolve(Buffer.concat(chunks));
      }
    });
    req.on('error', () => {
      if (!done) {
        done = true;
        resolve('aborted');
      }
    });
    req.on('aborted', () => {
      if (!done) {
        done = true;
        resolve('aborted');
      }
    });
  });
}

/** Make the socket's directory (0700), and clear a stale socket, refusing a live one. */
async function prepareSocket(
  socketPath: string,
  owner: { uid: number; gid: number } | undefined,
  dirMode: number,
): Promise<void> {
  const dir = dirname(socketPath);
  mkdirSync(dir, { recursive: true, mode: dirMode });
  // Only the owner of a shared directory may (and must) set its mode.
  try {
    chmodSync(dir, dirMode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') throw err;
  }
  if (owner) chownSync(dir, owner.uid, owner.gid);
  let st: ReturnType<typeof lstatSync> | undefined;
  try {
    st = lstatSync(socketPath);
  } catch {
    return;
  }
  if (!st.isSocket()) {
    throw new BbError(
      'INVALID_INPUT',
      `${socketPath} exists and is not a socket; not removing it. Choose another socket path.`,
    );
  }
  // A socket left by a dead sidecar refuses connections; a live one accepts them.
  const live = await new Promise<boolean>((resolve) => {
    const s = connect(socketPath);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
  if (live) {
    throw new BbError(
      'CONFLICT',
      `another process is serving ${socketPath}; stop it or choose another socket path`,
    );
  }
  unlinkSync(socketPath);
}
