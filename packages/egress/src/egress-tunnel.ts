import { connect, type Socket } from 'node:net';
import type { EgressLogEntry, LogTicket } from './log';
import type { TunnelCarrier } from './tunnel-carrier';

interface TunnelOptions {
  client: Socket;
  early: Buffer;
  address: string;
  host: string;
  port: number;
  rule: string;
  connectTimeoutMs: number;
  upstreams: Set<Socket>;
  ticket: LogTicket;
  refuse: (status: number, reason: string) => void;
}

/** The closing line of a tunnel that was established. */
function tunnelLine(
  o: TunnelOptions,
  started: number,
  bytesUp: number,
  bytesDown: number,
): EgressLogEntry {
  return {
    time: new Date().toISOString(),
    kind: 'egress',
    host: o.host,
    port: o.port,
    decision: 'allowed',
    rule: o.rule,
    method: 'CONNECT',
    bytesUp,
    bytesDown,
    durationMs: Date.now() - started,
  };
}

/**
 * Carry an allowed CONNECT tunnel: by bb-tunnel when `carrier` can take it (the
 * bytes then never pass through Node), else in this process (`openTunnel`). Either
 * way the client is told 200 or 502 and one line is logged when an established
 * tunnel ends.
 */
export function carryTunnel(o: TunnelOptions, carrier: TunnelCarrier | undefined): void {
  const started = Date.now();
  const handed = carrier?.hand(
    o.client,
    o.early,
    { address: o.address, port: o.port, host: o.host, connectTimeoutMs: o.connectTimeoutMs },
    (e) => {
      // Never reached: bb-tunnel said 502; the room is given back, as below.
      if (!e.reached) return o.ticket();
      o.ticket({
        ...tunnelLine(o, started, e.bytesUp, e.bytesDown),
        ...(e.lost
          ? { note: 'the tunnel relay exited before the tunnel ended: bytes not known' }
          : {}),
      });
    },
    // Given back (bb-tunnel went before it took the socket): carried here, unless the
    // client is gone meanwhile.
    (early) => (o.client.destroyed ? o.ticket() : openTunnel({ ...o, early })),
  );
  if (!handed) openTunnel(o);
}

/**
 * Carry a CONNECT tunnel blindly between an agent's connection and an allowed
 * address once the proxy has decided it: `200 Connection Established`, then
 * bytes both ways until either side ends, then one log line with what crossed.
 * `early` is what the client sent after its CONNECT head. `refuse` answers an
 * error before the tunnel is established; after that a failure only closes.
 */
export function openTunnel(o: TunnelOptions): void {
  const { client, early } = o;
  const started = Date.now();
  const upstream = connect({ host: o.address, port: o.port, timeout: o.connectTimeoutMs });
  let up = 0;
  let down = 0;
  let established = false;
  o.upstreams.add(upstream);
  let logged = false;
  const done = () => {
    if (logged) return;
    logged = true;
    o.upstreams.delete(upstream);
    // A tunnel never established carried nothing: its room is given back, its 502 said why.
    if (!established) return o.ticket();
    o.ticket(tunnelLine(o, started, up, down));
  };
  upstream.once('connect', () => {
    upstream.setTimeout(0);
    established = true;
    // A tunnel may idle as long as its ends like (TLS keep-alives are theirs to send).
    client.setTimeout(0);
    client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    up = early.length;
    if (early.length) upstream.write(early);
    client.on('data', (c: Buffer) => (up += c.length));
    upstream.on('data', (c: Buffer) => (down += c.length));
    client.pipe(upstream);
    upstream.pipe(client);
    client.resume();
  });
  upstream.once('timeout', () => upstream.destroy(new Error('connect timeout')));
  upstream.once('error', () => {
    // Inside an established tunnel the client speaks to the server, not to us: no answer of ours.
    if (!established && client.writable) o.refuse(502, `cannot reach ${o.host}:${o.port}`);
    else client.destroy();
    done();
  });
  upstream.once('close', () => {
    if (!client.destroyed) client.end();
    done();
  });
  client.once('close', () => upstream.destroy());
}
