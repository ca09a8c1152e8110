import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';

/**
 * Headers that belong to one connection (RFC 9110 §7.6.1) and never cross a
 * proxy. Transfer-Encoding is one too where the proxy frames the message again
 * (node:http does); the egress proxy carries bodies as they are, framing and all.
 */
export const CONNECTION_HEADERS: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
]);
const HOP_BY_HOP = [...CONNECTION_HEADERS, 'transfer-encoding'];

/**
 * A copy of `headers` without the hop-by-hop ones and without any header the
 * `Connection` header names (a client could otherwise ask a proxy to drop one
 * it adds, or smuggle its own past it).
 */
export function withoutHopByHop(
  headers: IncomingHttpHeaders | OutgoingHttpHeaders,
): Record<string, string | string[] | number | undefined> {
  const out: Record<string, string | string[] | number | undefined> = { ...headers };
  const named = [headers['connection']]
    .flat()
    .join(',')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean);
  for (const h of [...HOP_BY_HOP, ...named]) delete out[h];
  return out;
}
