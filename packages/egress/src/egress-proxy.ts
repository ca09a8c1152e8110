import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { resolveDestination } from './addresses';
import { denialBody } from './denial';
import { withoutHopByHop } from './headers';
import type { EgressLogger } from './log';
import { decide, type EgressRule } from './rules';

/** Whether the allowlist names this very address (for this port): then an internal one is allowed. */
const listedAddress = (rules: readonly EgressRule[], port: number) => (ip: string) =>
  rules.some((r) => !r.wildcard && r.host === ip.toLowerCase() && r.ports.includes(port));

export interface EgressProxyOptions {
  rules: EgressRule[];
  log?: EgressLogger;
  /** Largest request head accepted (bigger: 431). @default 16384 */
  maxHeaderBytes?: number;
  /** Time allowed to send the request head (slowloris guard). @default 10000 */
  headersTimeoutMs?: number;
  /** Time to connect upstream. @default 10000 */
  connectTimeoutMs?: number;
  /** Whether requests can still be logged; when not, they are refused (fail closed). */
  canLog?: () => boolean;
  /** Hold room in the log for an allowed connection's closing line; release once logged. */
  reserve?: () => () => void;
}

export interface EgressProxy {
  server: Server;
  /** Replace the rules; open tunnels keep going. */
  reload(rules: EgressRule[]): void;
  rules(): EgressRule[];
  close(): Promise<void>;
}

const STATUS_TEXT: Record<number, string> = {
  503: 'Service Unavailable',
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
};

function refuse(socket: Duplex, status: number, reason: string, json?: string): void {
  const body = json ?? `${reason}\n`;
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\ncontent-type: ${json ? 'application/json' : 'text/plain'}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/**
 * A deny-by-default forward proxy: `CONNECT host:port` tunnels (TLS) and
 * absolute-form HTTP requests, allowed only by the allowlist. A denial is a 403
 * whose body says why. Every connection is logged with its bytes.
 */
export function createEgressProxy(options: EgressProxyOptions): EgressProxy {
  let rules = options.rules;
  const log = options.log ?? (() => {});
  const tunnels = new Set<Socket>();
  const denied = (host: string, port: number, rule: string, method?: string) =>
    log({
      time: new Date().toISOString(),
      kind: 'egress',
      host,
      port,
      decision: 'denied',
      rule,
      ...(method ? { method } : {}),
      bytesUp: 0,
      bytesDown: 0,
      durationMs: 0,
    });
  const headersTimeout = options.headersTimeoutMs ?? 10_000;
  const server = createServer(
    {
      maxHeaderSize: options.maxHeaderBytes ?? 16384,
      // Node enforces headersTimeout only when it sweeps connections (30 s by
      // default): sweep often enough that a slow client is really cut off.
      connectionsCheckingInterval: Math.max(100, Math.min(1000, Math.floor(headersTimeout / 2))),
    },
    (req, res) => forward(req, res),
  );
  server.headersTimeout = headersTimeout;
  server.requestTimeout = 300_000;
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) return socket.destroy();
    if (err.code === 'HPE_HEADER_OVERFLOW') return refuse(socket, 431, 'request headers too large');
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT')
      return refuse(socket, 408, 'request headers took too long');
    refuse(socket, 400, 'bad request');
  });

  server.on('connect', (req: IncomingMessage, client: Duplex, head: Buffer) => {
    const started = Date.now();
    const target = req.url ?? '';
    const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(target);
    if (!m) {
      denied(target, 0, 'CONNECT target is not host:port');
      return refuse(
        client,
        400,
        `CONNECT needs host:port, got ${JSON.stringify(target).slice(0, 100)}`,
      );
    }
    const host = m[1]!.replace(/^\[|\]$/g, '');
    const port = Number(m[2]);
    if (options.canLog && !options.canLog())
      return refuse(client, 503, 'the egress log is full: nothing more can go out of this bottle');
    const d = decide(rules, host, port);
    if (!d.allowed) {
      denied(host, port, d.rule, 'CONNECT');
      return refuse(client, 403, '', denialBody('egress', { host, port }, d.rule));
    }
    client.pause();
    void resolveDestination(host, listedAddress(rules, port)).then((where) => {
      if (!where.ok) {
        denied(host, port, where.reason, 'CONNECT');
        return refuse(client, 403, '', denialBody('egress', { host, port }, where.reason));
      }
      client.resume();
      tunnel(where.address);
    });
    const tunnel = (address: string) => {
      const upstream = connect({
        host: address,
        port,
        timeout: options.connectTimeoutMs ?? 10_000,
      });
      let up = head.length;
      let down = 0;
      tunnels.add(upstream);
      // Room for this tunnel's line is held from now: what was allowed is always logged.
      const release = options.reserve?.();
      const done = () => {
        if (!tunnels.delete(upstream)) return;
        release?.();
        log({
          time: new Date().toISOString(),
          kind: 'egress',
          host,
          port,
          decision: 'allowed',
          rule: d.rule,
          method: 'CONNECT',
          bytesUp: up,
          bytesDown: down,
          durationMs: Date.now() - started,
        });
      };
      upstream.once('connect', () => {
        upstream.setTimeout(0);
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length) upstream.write(head);
        client.on('data', (c: Buffer) => (up += c.length));
        upstream.on('data', (c: Buffer) => (down += c.length));
        client.pipe(upstream);
        upstream.pipe(client);
      });
      upstream.once('timeout', () => upstream.destroy(new Error('connect timeout')));
      upstream.once('error', () => {
        if (client.writable && down === 0) refuse(client, 502, `cannot reach ${host}:${port}`);
        client.destroy();
        done();
      });
      upstream.once('close', () => {
        // end(), not destroy(): bytes still buffered for the client must arrive.
        if (!client.destroyed) client.end();
        done();
      });
      client.once('error', () => upstream.destroy());
      client.once('close', () => upstream.destroy());
    };
  });

  function forward(req: IncomingMessage, res: ServerResponse): void {
    const started = Date.now();
    let url: URL;
    try {
      url = new URL(req.url ?? '');
    } catch {
      res
        .writeHead(400, { 'content-type': 'text/plain' })
        .end('this is a proxy: send absolute-form requests (http://host/path) or CONNECT\n');
      return;
    }
    if (url.protocol !== 'http:') {
      res
        .writeHead(400, { 'content-type': 'text/plain' })
        .end(`only http:// is forwarded as plain requests; use CONNECT for ${url.protocol}\n`);
      return;
    }
    const port = Number(url.port || 80);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    // A Host header that names somewhere else is an attempt to smuggle a request past the rule.
    const hostHeader = (req.headers.host ?? '').toLowerCase();
    if (hostHeader && hostHeader !== url.host.toLowerCase()) {
      denied(host, port, `Host header ${hostHeader} does not match ${url.host}`, req.method);
      res
        .writeHead(400, { 'content-type': 'text/plain' })
        .end(`the Host header (${hostHeader}) does not match the request target (${url.host})\n`);
      return;
    }
    if (options.canLog && !options.canLog()) {
      res
        .writeHead(503, { 'content-type': 'text/plain' })
        .end('the egress log is full: nothing more can go out of this bottle\n');
      return;
    }
    const d = decide(rules, host, port);
    if (!d.allowed) {
      denied(host, port, d.rule, req.method);
      res
        .writeHead(403, { 'content-type': 'application/json' })
        .end(denialBody('egress', { host, port }, d.rule));
      return;
    }
    req.pause();
    void resolveDestination(host, listedAddress(rules, port)).then((where) => {
      if (!where.ok) {
        denied(host, port, where.reason, req.method);
        res
          .writeHead(403, { 'content-type': 'application/json' })
          .end(denialBody('egress', { host, port }, where.reason));
        return;
      }
      req.resume();
      send(where.address);
    });
    const send = (address: string) => {
      // Hop-by-hop headers (and those Connection names) stop here, as do proxy credentials.
      const headers = withoutHopByHop(req.headers);
      let up = 0;
      let down = 0;
      const release = options.reserve?.();
      req.on('data', (c: Buffer) => (up += c.length));
      const upstream = httpRequest(
        {
          host: address,
          port,
          method: req.method,
          path: `${url.pathname}${url.search}`,
          headers,
          timeout: options.connectTimeoutMs ?? 10_000,
        },
        (ures) => {
          res.writeHead(ures.statusCode ?? 502, withoutHopByHop(ures.headers));
          ures.on('data', (c: Buffer) => (down += c.length));
          ures.pipe(res);
          ures.on('end', () => {
            release?.();
            log({
              time: new Date().toISOString(),
              kind: 'egress',
              host,
              port,
              decision: 'allowed',
              rule: d.rule,
              method: req.method,
              status: ures.statusCode,
              bytesUp: up,
              bytesDown: down,
              durationMs: Date.now() - started,
            });
          });
        },
      );
      upstream.on('error', (err) => {
        release?.();
        if (!res.headersSent)
          res
            .writeHead(502, { 'content-type': 'text/plain' })
            .end(`cannot reach ${host}:${port}: ${err.message}\n`);
        else res.destroy();
      });
      req.pipe(upstream);
    };
  }

  return {
    server,
    reload(next) {
      rules = next;
    },
    rules: () => rules,
    close: () =>
      new Promise<void>((resolve) => {
        for (const t of tunnels) t.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
