import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

/**
 * Addresses a bottle must never reach by name: this host, private networks,
 * link-local (cloud metadata at 169.254.169.254 included), carrier-grade NAT,
 * unique-local and multicast, documentation and reserved ranges.
 */
const INTERNAL = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const)
  INTERNAL.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ['::', 96],
  ['::1', 128],
  ['100::', 64],
  ['64:ff9b:1::', 48],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const)
  INTERNAL.addSubnet(net, bits, 'ipv6');

/** The IPv4 address inside an IPv4-mapped, NAT64 or 6to4 IPv6 address, if any. */
function embeddedV4(ip: string): string | undefined {
  const m = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (m) return m[1];
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(ip);
  const six = /^2002:([0-9a-f]{1,4}):([0-9a-f]{1,4})(?::|$)/i.exec(ip);
  const pair = hex ?? six;
  if (!pair) return undefined;
  const a = Number.parseInt(pair[1]!, 16);
  const b = Number.parseInt(pair[2]!, 16);
  return `${a >> 8}.${a & 255}.${b >> 8}.${b & 255}`;
}

/** This machine's own addresses: the proxy shares its network, so they are internal too. */
function ownAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(networkInterfaces()))
    for (const a of list ?? []) out.add(a.address.toLowerCase().replace(/%.*$/, ''));
  return out;
}

/** Whether `ip` is loopback, private, link-local, metadata, or otherwise not the public internet. */
export function isInternalAddress(ip: string): boolean {
  if (ownAddresses().has(ip.toLowerCase())) return true;
  const family = isIP(ip);
  if (family === 4) return INTERNAL.check(ip, 'ipv4');
  if (family === 6) {
    const v4 = embeddedV4(ip);
    if (v4) return isInternalAddress(v4);
    return INTERNAL.check(ip, 'ipv6');
  }
  return true;
}

export type Resolution = { ok: true; address: string } | { ok: false; reason: string };

/**
 * Resolve `host` once and decide where a connection may go: every answer must
 * be a public address, or one the allowlist names itself (`allowed(ip)`). The
 * connection then goes to the address checked here, never to a second lookup
 * (which a rebinding name could answer differently).
 */
export async function resolveDestination(
  host: string,
  allowed: (ip: string) => boolean,
  timeoutMs = 5000,
): Promise<Resolution> {
  if (isIP(host)) return { ok: true, address: host };
  let timer: NodeJS.Timeout | undefined;
  try {
    const answers = await Promise.race([
      lookup(host, { all: true, verbatim: true }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer in ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
    if (answers.length === 0) return { ok: false, reason: `${host} has no address` };
    for (const a of answers)
      if (isInternalAddress(a.address) && !allowed(a.address))
        return {
          ok: false,
          reason: `${host} resolves to ${a.address}, an internal address; list ${a.address} itself to allow it`,
        };
    return { ok: true, address: answers[0]!.address };
  } catch (err) {
    return { ok: false, reason: `${host} cannot be resolved (${(err as Error).message})` };
  } finally {
    if (timer) clearTimeout(timer);
  }
}
