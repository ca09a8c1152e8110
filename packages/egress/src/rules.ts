import { isIP } from 'node:net';
import { BbError } from '@bb/errors';

/** One allowlist entry: an exact host or a `*.suffix`, and the ports it opens. */
export interface EgressRule {
  /** The entry as written, e.g. `*.npmjs.org:443`. */
  text: string;
  host: string;
  wildcard: boolean;
  /** Allowed ports; without a port in the entry, 80 and 443. */
  ports: number[];
}

const HOST = /^(\*\.)?([a-z0-9-]+\.)*[a-z0-9-]+$/i;

/** Parse allowlist entries (`host`, `*.suffix`, an IP, `[ipv6]`, optionally `:port`), or throw naming the bad one. */
export function parseRules(entries: readonly string[]): EgressRule[] {
  return entries.map((text) => {
    const raw = text.trim().toLowerCase();
    // `[::1]:8080` for an IPv6 address with a port; `host:port` otherwise.
    const m = /^\[([0-9a-f:.]+)\](?::(\d{1,5}))?$/.exec(raw) ?? /^(.*?)(?::(\d{1,5}))?$/.exec(raw);
    const host = m?.[1] ?? '';
    const port = m?.[2] ? Number(m[2]) : undefined;
    if (!HOST.test(host) && !isIP(host)) {
      throw new BbError(
        'INVALID_INPUT',
        `egress rule ${JSON.stringify(text)} is not a host, *.suffix or IP, optionally with :port`,
      );
    }
    if (port !== undefined && (port < 1 || port > 65535))
      throw new BbError('INVALID_INPUT', `egress rule ${JSON.stringify(text)} has an invalid port`);
    const wildcard = host.startsWith('*.');
    return {
      text,
      host: wildcard ? host.slice(2) : host,
      wildcard,
      ports: port ? [port] : [80, 443],
    };
  });
}

export interface Decision {
  allowed: boolean;
  /** The entry that allowed it, or why nothing did. */
  rule: string;
}

/**
 * Decide a destination. Hosts compare case-insensitively without a trailing dot;
 * `*.suffix` matches subdomains only, never the bare suffix; an IP address is
 * allowed only when listed as that IP.
 */
export function decide(rules: readonly EgressRule[], host: string, port: number): Decision {
  const h = host
    .toLowerCase()
    .replace(/\.$/, '')
    .replace(/^\[(.*)\]$/, '$1');
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    return { allowed: false, rule: `invalid port ${port}` };
  for (const r of rules) {
    const hostOk = r.wildcard ? h.endsWith(`.${r.host}`) && !isIP(h) : h === r.host;
    if (hostOk && r.ports.includes(port)) return { allowed: true, rule: r.text };
  }
  if (isIP(h)) return { allowed: false, rule: 'IP addresses are denied unless listed' };
  const hostOnly = rules.find((r) => (r.wildcard ? h.endsWith(`.${r.host}`) : h === r.host));
  return {
    allowed: false,
    rule: hostOnly
      ? `port ${port} is not allowed for ${hostOnly.text}`
      : 'no rule allows this host (deny by default)',
  };
}
