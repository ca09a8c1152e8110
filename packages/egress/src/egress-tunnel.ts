import { connect, type Socket } from 'node:net';
import type { LogTicket } from './log';

/**
 * Carry a CONNECT tunnel blindly between an agent's connection and an allowed
 * address once the proxy has decided it: `200 Connection Established`, then
 * bytes both ways until either side ends, then one log line with what crossed.
 * `early` is what the client sent after its CONNECT head. `refuse` answers an
 * error before the tunnel is established; after that a failure only closes.
 */
export function openTunnel(o: {
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
}): void {
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
    o.ticket({
      time: new Date().toISOString(),
      kind: 'egress',
      host: o.host,
      port: o.port,
      decision: 'allowed',
      rule: o.rule,
      method: 'CONNECT',
      bytesUp: up,
      bytesDown: down,
      durationMs: Date.now() - started,
    });
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
