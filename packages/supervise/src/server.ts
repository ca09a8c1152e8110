import { rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { errorMessage } from '@bb/errors';
import { toWireError } from '@bb/forge-sidecar';
import { listenUnixSocket } from '@bb/wall';
import type { SuperviseSidecar } from './sidecar';

export interface RunningSuperviseServer {
  server: Server;
  close(): Promise<void>;
}

const MAX_BODY = 256 * 1024;

/**
 * Serve a supervise sidecar as JSON-RPC 2.0 over HTTP (`POST /rpc`) on a Unix
 * socket: `propose`, `wait`, `config`. A call that waits is ended early when its
 * client goes away.
 */
export async function serveSupervise(
  sidecar: SuperviseSidecar,
  socketPath: string,
  options: { mode?: number; log?: (line: Record<string, unknown>) => void } = {},
): Promise<RunningSuperviseServer> {
  const log = options.log ?? (() => {});
  // A Map: a method name is looked up among these three and nowhere else (a plain
  // object would answer `constructor`, `toString` and the rest of its prototype).
  const methods = new Map<string, (params: unknown, signal: AbortSignal) => unknown>([
    ['propose', (p, s) => sidecar.propose(p, s)],
    ['wait', (p, s) => sidecar.wait(p, s)],
    ['config', () => sidecar.config()],
  ]);
  const server = createServer({ connectionsCheckingInterval: 2000 }, (req, res) => {
    if (req.method !== 'POST' || (req.url ?? '').split('?')[0] !== '/rpc') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('POST /rpc\n');
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        res.writeHead(413).end();
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', async () => {
      if (res.headersSent) return;
      let id: unknown = null;
      let body: unknown;
      try {
        const msg = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          id?: unknown;
          method?: unknown;
          params?: unknown;
        };
        id = msg.id ?? null;
        const fn = typeof msg.method === 'string' ? methods.get(msg.method) : undefined;
        if (!fn) {
          body = {
            jsonrpc: '2.0',
            id,
            error: {
              code: -32601,
              message: `Method not found: ${String(msg.method).slice(0, 60)}; methods are ${[...methods.keys()].join(', ')}`,
            },
          };
        } else {
          const result = await fn(msg.params ?? {}, abort.signal);
          body = { jsonrpc: '2.0', id, result };
          log({ method: msg.method, ok: true });
        }
      } catch (err) {
        if (err instanceof SyntaxError)
          body = { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } };
        else {
          const { wire, internal } = toWireError(err);
          log({ ok: false, error: internal ? errorMessage(err) : wire.message });
          body = { jsonrpc: '2.0', id, error: wire };
        }
      }
      if (!res.writableEnded)
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    });
  });
  // A handful of waiting calls is all an agent needs; more is a flood.
  server.maxConnections = 32;
  server.headersTimeout = 10_000;
  // Long enough for the longest wait a call may ask for, plus slack.
  server.requestTimeout = 11 * 60_000;
  server.on('clientError', (_e, s) => s.destroy());
  await listenUnixSocket(server, socketPath, { mode: options.mode ?? 0o600 });
  return {
    server,
    close: () =>
      new Promise<void>((r) => {
        sidecar.close();
        server.closeAllConnections();
        // The socket was renamed into place: Node removes only the name it bound.
        server.close(() => {
          rmSync(socketPath, { force: true });
          r();
        });
      }),
  };
}
