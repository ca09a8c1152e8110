import type { IncomingMessage, ServerResponse } from 'node:http';
import { getRequestListener } from '@hono/node-server';

/**
 * Serve a `(Request) => Promise<Response>` handler from node:http.
 *
 * The plumbing is `@hono/node-server`'s listener (the adapter the MCP SDK
 * already brings in): it builds the `Request` lazily from the Node request and
 * writes plain responses without a web-stream round trip, about twice the
 * throughput of `Readable.toWeb` + `new Request` per delivery. It never
 * replaces the global `Request`/`Response` (a library must not). A handler that
 * throws is answered 500 with no detail.
 */
export function toNodeListener(
  handler: (req: Request) => Promise<Response>,
  base = 'http://localhost',
): (req: IncomingMessage, res: ServerResponse) => void {
  const url = new URL(base);
  const listener = getRequestListener(handler, {
    hostname: url.host,
    overrideGlobalObjects: false,
    errorHandler: () =>
      new Response('{"error":"internal error"}\n', {
        status: 500,
        headers: { 'content-type': 'application/json' },
      }),
  });
  return (req, res) => {
    void listener(req, res);
  };
}
