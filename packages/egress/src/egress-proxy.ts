import { createServer, type Server, type Socket } from 'node:net';
import { EgressConnection } from './egress-connection';
import type { EgressLogger, LogTicket } from './log';
import type { EgressRule } from './rules';
import { TunnelCarrier } from './tunnel-carrier';

export interface EgressProxyOptions {
  rules: EgressRule[];
  log?: EgressLogger;
  /** Largest request head accepted (bigger: 431). @default 16384 */
  maxHeaderBytes?: number;
  /** Time allowed to send a request head (slowloris guard). @default 10000 */
  headersTimeoutMs?: number;
  /** Time to connect upstream. @default 10000 */
  connectTimeoutMs?: number;
  /** A plain-HTTP connection quiet both ways this long is closed (tunnels are not). @default 300000 */
  idleTimeoutMs?: number;
  /** Whether requests can still be logged; when not, they are refused (fail closed). */
  canLog?: () => boolean;
  /**
   * Hold room in the log for an allowed request's closing line: the ticket
   * writes that line (or, called with nothing, gives the room back).
   * `fileLogger`'s `reserve` is one.
   */
  reserve?: () => LogTicket;
  /** Agent connections served at once; more are closed as they come. @default 256 */
  maxConnections?: number;
  /**
   * The bb-tunnel program that carries allowed tunnels (see `TunnelCarrier`), or
   * false to carry them in this process. @default the one the build made, if any
   */
  tunnelProgram?: string | false;
}

export interface EgressProxy {
  /** Listen on it (a Unix socket beside a bottle). */
  server: Server;
  /** Replace the rules: every later request and tunnel is decided by them; open tunnels keep going. */
  reload(rules: EgressRule[]): void;
  rules(): EgressRule[];
  close(): Promise<void>;
}

/**
 * A deny-by-default forward proxy: `CONNECT host:port` tunnels (TLS) and
 * absolute-form HTTP requests, allowed only by the allowlist. A denial is a 403
 * whose body says why. Every request and tunnel is logged with its bytes.
 *
 * It speaks HTTP/1.1 itself rather than through `node:http`: each request is
 * decided on its head and then its bytes are carried as they are, the way a
 * blind relay would, so a kept connection costs little more than the relay.
 * The framing it accepts is strict (see `http-framing.ts`).
 */
export function createEgressProxy(options: EgressProxyOptions): EgressProxy {
  let rules = options.rules;
  const clients = new Set<Socket>();
  const upstreams = new Set<Socket>();
  const tunnels =
    options.tunnelProgram === false
      ? undefined
      : new TunnelCarrier(options.tunnelProgram ?? undefined);
  const ctx = {
    rules: () => rules,
    log: options.log ?? (() => {}),
    maxHeaderBytes: options.maxHeaderBytes ?? 16384,
    headersTimeoutMs: options.headersTimeoutMs ?? 10_000,
    connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
    idleTimeoutMs: options.idleTimeoutMs ?? 300_000,
    canLog: options.canLog,
    reserve: options.reserve,
    upstreams,
    tunnels,
  };
  const maxConnections = options.maxConnections ?? 256;
  const server = createServer({ allowHalfOpen: true }, (client) => {
    // Tunnels handed to bb-tunnel left the server's count: they still count here.
    if (clients.size + (tunnels?.open ?? 0) >= maxConnections) return void client.destroy();
    clients.add(client);
    client.once('close', () => clients.delete(client));
    new EgressConnection(client, ctx);
  });
  server.maxConnections = maxConnections;
  return {
    server,
    reload(next) {
      rules = next;
    },
    rules: () => rules,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of [...upstreams, ...clients]) s.destroy();
      await Promise.all([closed, tunnels?.close()]);
    },
  };
}
