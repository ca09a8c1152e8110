import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';

/** Serve a `(Request) => Promise<Response>` handler from node:http, streaming both bodies. */
export function toNodeListener(
  handler: (req: Request) => Promise<Response>,
  base = 'http://localhost',
) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    const headers = new Headers();
    for (const [k, v] of Object.entries(req.headers)) {
      if (Array.isArray(v)) for (const x of v) headers.append(k, x);
      else if (v !== undefined) headers.set(k, v);
    }
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
    const request = new Request(new URL(req.url ?? '/', base), {
      method: req.method ?? 'GET',
      headers,
      ...(hasBody ? { body: Readable.toWeb(req) as ReadableStream, duplex: 'half' } : {}),
    } as RequestInit);
    handler(request).then(
      async (response) => {
        res.writeHead(response.status, Object.fromEntries(response.headers));
        if (response.body)
          for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>)
            res.write(chunk);
        res.end();
      },
      () => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":"internal error"}\n');
      },
    );
  };
}
