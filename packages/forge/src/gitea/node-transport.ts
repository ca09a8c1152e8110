import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

/** One HTTP exchange as `GiteaClient` makes it: undici's `Pool` is one, so is `nodeTransport`. */
export interface GiteaTransport {
  request(o: {
    method: string;
    path: string;
    headers: Record<string, string>;
    body?: string | undefined;
  }): Promise<{
    statusCode: number;
    headers: Record<string, string | string[] | undefined>;
    body: { text(): Promise<string> };
  }>;
  close(): Promise<void>;
}

export interface NodeTransportOptions {
  connections: number;
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  /** How long a kept connection may wait unused before it is closed. @default 4000 */
  idleMs?: number;
}

/** An error with a code, as undici's and node's network errors have. */
function timeout(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

/** The most of an answer's body that is read; a bigger one fails the request. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

function readBody(res: IncomingMessage, idleMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.setTimeout(idleMs, () =>
      res.destroy(timeout('BODY_TIMEOUT', `no body byte for ${idleMs} ms`)),
    );
    res.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY_BYTES)
        return res.destroy(timeout('BODY_TOO_LARGE', `the answer is over ${MAX_BODY_BYTES} bytes`));
      chunks.push(c);
    });
    res.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
    // Ended without 'end' (cut off, or destroyed above): settled either way.
    res.once('close', () => {
      if (!res.complete) reject(new Error('the answer was cut off'));
    });
  });
}

/**
 * `GiteaClient`'s requests on node's own HTTP client (keep-alive agent, the same
 * timeouts as the undici pool): what a bottle's gate uses, one per bottle, where
 * undici's pool and its WebAssembly parser would cost about 20 MB a process (measured
 * with one pool and a few requests against node:http's agent: 28.6 vs 8.0 MB of
 * anonymous memory). Redirects are not followed.
 */
export function nodeTransport(origin: string, o: NodeTransportOptions): GiteaTransport {
  const url = new URL(origin);
  const https = url.protocol === 'https:';
  const agentOptions = { keepAlive: true, maxSockets: o.connections, timeout: o.idleMs ?? 4000 };
  const agent = https ? new HttpsAgent(agentOptions) : new HttpAgent(agentOptions);
  const send = https ? httpsRequest : httpRequest;
  return {
    request: ({ method, path, headers, body }) =>
      new Promise((resolve, reject) => {
        const req = send({
          host: url.hostname.replace(/^\[|\]$/g, ''),
          port: url.port || (https ? 443 : 80),
          method,
          path,
          agent,
          headers:
            body === undefined
              ? headers
              : { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        });
        const headersTimer = setTimeout(
          () => req.destroy(timeout('HEADERS_TIMEOUT', `no answer for ${o.headersTimeoutMs} ms`)),
          o.headersTimeoutMs,
        );
        req.once('socket', (socket) => {
          if (!socket.connecting) return;
          const t = setTimeout(
            () =>
              req.destroy(timeout('CONNECT_TIMEOUT', `cannot connect in ${o.connectTimeoutMs} ms`)),
            o.connectTimeoutMs,
          );
          socket.once('connect', () => clearTimeout(t));
          socket.once('close', () => clearTimeout(t));
        });
        req.once('response', (res) => {
          clearTimeout(headersTimer);
          resolve({
            statusCode: res.statusCode ?? 0,
            headers: res.headers,
            body: { text: () => readBody(res, o.bodyTimeoutMs) },
          });
        });
        req.on('error', (err) => {
          clearTimeout(headersTimer);
          reject(err);
        });
        req.end(body);
      }),
    close: async () => agent.destroy(),
  };
}
