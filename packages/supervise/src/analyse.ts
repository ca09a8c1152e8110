import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { isInternalAddress } from '@bb/egress';
import type { ProposalKind } from './contract';
import { baseImagesOf, parseDockerfile } from './validate';

/** One thing the operator should look at before approving. */
export interface Finding {
  severity: 'high' | 'medium' | 'info';
  code:
    | 'credential-new-host'
    | 'credential-new-path'
    | 'secret-new'
    | 'wildcard'
    | 'internal-address'
    | 'metadata-address'
    | 'plain-http'
    | 'host-new'
    | 'user-root'
    | 'base-new'
    | 'pipe-to-shell'
    | 'remote-add'
    | 'runtime-ignored'
    | 'environment'
    | 'shell'
    | 'unparsed';
  message: string;
}

const METADATA = new Set([
  '169.254.169.254',
  'fd00:ec2::254',
  'metadata.google.internal',
  'metadata',
  '100.100.100.200',
]);

/** Variables that change what a program loads or runs. */
const RISKY_ENV =
  /^(PATH|LD_[A-Z_]+|NODE_OPTIONS|NODE_PATH|PYTHON(PATH|STARTUP|HOME)|PERL5?(LIB|OPT)|RUBY(LIB|OPT)|GIT_[A-Z_]+|BASH_ENV|ENV|SHELLOPTS|PROMPT_COMMAND|HOME|HTTPS?_PROXY|https?_proxy|NO_PROXY|no_proxy|SSL_CERT_(FILE|DIR)|NODE_EXTRA_CA_CERTS|CURL_CA_BUNDLE|REQUESTS_CA_BUNDLE)$/;

type Routes = {
  routes: Array<{ prefix: string; upstream: string; headers: Record<string, string> }>;
};

/**
 * The host an allowlist entry names, as the proxy will reach it: brackets and a
 * port taken off, then normalised the way a URL parser does (`127.1`,
 * `0x7f000001`, `2130706433` and `0177.0.0.1` are all `127.0.0.1`; IPv6 in its
 * short form; a trailing dot dropped).
 */
export function hostOf(entry: string): string {
  const e = entry.trim().toLowerCase();
  const bracketed = /^\[([^\]]*)\](?::\d+)?$/.exec(e);
  let h = bracketed ? bracketed[1]! : isIP(e) === 6 ? e : e.replace(/:\d+$/, '');
  if (!h.startsWith('*.'))
    try {
      h = new URL(`http://${isIP(h) === 6 ? `[${h}]` : h}/`).hostname.replace(/^\[|\]$/g, '');
    } catch {}
  return h.replace(/\.$/, '');
}

/** Names that reach this machine, its cluster or its cloud whatever DNS says. */
const LOCAL_NAMES = new Set([
  'localhost',
  'localhost.localdomain',
  'ip6-localhost',
  'ip6-loopback',
  'kubernetes',
  'kubernetes.default',
  'instance-data',
  'localtest.me',
  'lvh.me',
]);
const LOCAL_SUFFIXES = [
  '.localhost',
  '.internal',
  '.local',
  '.localdomain',
  '.home.arpa',
  '.svc',
  '.localtest.me',
  '.lvh.me',
];

/** This machine's own names (its host name, short and long). */
function ownNames(): string[] {
  const h = hostname().toLowerCase();
  return [h, h.split('.')[0]!];
}

/**
 * An internal IPv4 address a name spells out (`127.0.0.1.nip.io`, `10-0-0-1.sslip.io`,
 * or in hex, `7f000001.nip.io`).
 */
function spelledAddress(h: string): string | undefined {
  for (const m of h.matchAll(/(?:^|[.-])([0-9a-f]{8})(?=[.-]|$)/g)) {
    const n = Number.parseInt(m[1]!, 16);
    const ip = [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
    if (isInternalAddress(ip)) return ip;
  }
  for (const m of h.matchAll(
    /(?:^|[.-])(\d{1,3})[.-](\d{1,3})[.-](\d{1,3})[.-](\d{1,3})(?=[.-]|$)/g,
  )) {
    const ip = m.slice(1, 5).join('.');
    if (isIP(ip) === 4 && isInternalAddress(ip)) return ip;
  }
  return undefined;
}

function addressFindings(host: string, where: string): Finding[] {
  const h = host.toLowerCase();
  if (METADATA.has(h))
    return [
      {
        severity: 'high',
        code: 'metadata-address',
        message: `${where} is a cloud metadata address (${host})`,
      },
    ];
  const spelled = isIP(h) ? undefined : spelledAddress(h);
  if (spelled)
    return [
      {
        severity: 'high',
        code: 'internal-address',
        message: `${where} names ${spelled} in its name; such names resolve to that internal address (${host})`,
      },
    ];
  if (
    LOCAL_NAMES.has(h) ||
    LOCAL_SUFFIXES.some((x) => h.endsWith(x)) ||
    (h.length > 0 && ownNames().includes(h))
  )
    return [
      {
        severity: 'high',
        code: 'internal-address',
        message: `${where} names an internal host (${host})`,
      },
    ];
  if (isIP(h) && isInternalAddress(h))
    return [
      {
        severity: 'high',
        code: 'internal-address',
        message: `${where} is a loopback, private or link-local address (${host})`,
      },
    ];
  return [];
}

function parseJson<T>(text: string): T | undefined {
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

/** Risk findings for a proposal, comparing the current file with the proposed one. */
export function analyse(kind: ProposalKind, current: string, proposed: string): Finding[] {
  if (kind === 'routes') return analyseRoutes(current, proposed);
  if (kind === 'allowlist') return analyseAllowlist(current, proposed);
  return analyseDockerfile(current, proposed);
}

function analyseRoutes(current: string, proposed: string): Finding[] {
  const before = parseJson<Routes>(current)?.routes ?? [];
  const after = parseJson<Routes>(proposed)?.routes;
  if (!after)
    return [
      { severity: 'medium', code: 'unparsed', message: 'the proposed routes could not be read' },
    ];
  const out: Finding[] = [];
  const sentTo = new Map<string, Set<string>>();
  // Where each secret went, to the path: a route's upstream path bounds what its key reaches.
  const sentToUrl = new Map<string, Set<string>>();
  for (const r of before)
    for (const ref of Object.values(r.headers ?? {})) {
      const host = safeHost(r.upstream);
      if (host) (sentTo.get(ref) ?? sentTo.set(ref, new Set()).get(ref)!).add(host);
      (sentToUrl.get(ref) ?? sentToUrl.set(ref, new Set()).get(ref)!).add(r.upstream);
    }
  for (const r of after) {
    const url = safeUrl(r.upstream);
    if (!url) continue;
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    out.push(...addressFindings(host, `route ${r.prefix} upstream`));
    const refs = Object.values(r.headers ?? {});
    if (url.protocol === 'http:' && refs.length && !addressFindings(host, '').length)
      out.push({
        severity: 'high',
        code: 'plain-http',
        message: `route ${r.prefix} sends ${refs.join(', ')} over plain HTTP to ${host}`,
      });
    for (const ref of refs) {
      const known = sentTo.get(ref);
      if (!known)
        out.push({
          severity: 'medium',
          code: 'secret-new',
          message: `route ${r.prefix} uses the secret ${ref}, which no route used before`,
        });
      else if (!known.has(host))
        out.push({
          severity: 'high',
          code: 'credential-new-host',
          message: `route ${r.prefix} sends ${ref} to ${host}, a new host for it (before: ${[...known].join(', ')})`,
        });
      else if (!sentToUrl.get(ref)?.has(r.upstream))
        out.push({
          severity: 'medium',
          code: 'credential-new-path',
          message: `route ${r.prefix} sends ${ref} to ${r.upstream}, which no route sent it to before (before: ${[...(sentToUrl.get(ref) ?? [])].join(', ')}): a shorter path lets the key reach more of that API`,
        });
    }
  }
  return out;
}

function analyseAllowlist(current: string, proposed: string): Finding[] {
  const before = new Set(
    (parseJson<{ allow: string[] }>(current)?.allow ?? []).map((e) => e.trim().toLowerCase()),
  );
  const after = parseJson<{ allow: string[] }>(proposed)?.allow;
  if (!after)
    return [
      { severity: 'medium', code: 'unparsed', message: 'the proposed allowlist could not be read' },
    ];
  const out: Finding[] = [];
  for (const entry of after) {
    const e = entry.trim().toLowerCase();
    if (before.has(e)) continue;
    const host = hostOf(e);
    if (host.startsWith('*.'))
      out.push({
        severity: 'medium',
        code: 'wildcard',
        message: `${entry} opens every subdomain of ${host.slice(2)}`,
      });
    const addr = addressFindings(host, entry);
    out.push(...addr);
    if (!addr.length && !host.startsWith('*.'))
      out.push({ severity: 'info', code: 'host-new', message: `${entry} is a new host` });
  }
  return out;
}

function analyseDockerfile(current: string, proposed: string): Finding[] {
  let after: ReturnType<typeof parseDockerfile>;
  try {
    after = parseDockerfile(proposed);
  } catch {
    return [
      {
        severity: 'medium',
        code: 'unparsed',
        message: 'the proposed Dockerfile could not be parsed',
      },
    ];
  }
  let beforeBases: string[] = [];
  try {
    beforeBases = baseImagesOf(parseDockerfile(current)).map((b) => b.image);
  } catch {}
  const out: Finding[] = [];
  for (const { image, line } of baseImagesOf(after))
    if (!beforeBases.includes(image))
      out.push({
        severity: 'medium',
        code: 'base-new',
        message: `line ${line}: a new base image ${image}`,
      });
  const lastUser = after.filter((i) => i.keyword === 'USER').at(-1);
  if (lastUser && /^(root|0)(:|$)/.test(lastUser.args))
    out.push({
      severity: 'high',
      code: 'user-root',
      message: `line ${lastUser.line}: the agent would run as root (USER ${lastUser.args})`,
    });
  for (const i of after) {
    if (i.keyword === 'RUN' && /\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da)?sh\b/.test(i.args))
      out.push({
        severity: 'high',
        code: 'pipe-to-shell',
        message: `line ${i.line}: pipes a download into a shell`,
      });
    // What an image says about how it is run, the host decides itself (I10): shown so the
    // operator knows it does nothing at run time.
    if (['ENTRYPOINT', 'CMD', 'STOPSIGNAL', 'WORKDIR', 'EXPOSE'].includes(i.keyword))
      out.push({
        severity: 'info',
        code: 'runtime-ignored',
        message: `line ${i.line}: ${i.keyword} ${i.args.slice(0, 60)} has no effect when the bottle runs (the host sets its own command, stop signal, directory and network)`,
      });
    if (i.keyword === 'USER' && !/^(root|0)(:|$)/.test(i.args))
      out.push({
        severity: 'info',
        code: 'runtime-ignored',
        message: `line ${i.line}: USER ${i.args.slice(0, 40)} applies to the RUN steps after it; the agent always runs as the bottle's own user`,
      });
    if (i.keyword === 'ENV' || i.keyword === 'ARG') {
      const risky = [...i.args.matchAll(/(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)(?==|\s|$)/g)]
        .map((m) => m[1]!)
        .filter((k) => RISKY_ENV.test(k));
      if (i.keyword === 'ENV')
        out.push({
          severity: risky.length ? 'medium' : 'info',
          code: 'environment',
          message: `line ${i.line}: sets the agent's environment${risky.length ? `, including ${risky.join(', ')}, which change what programs load or run` : ''} (${i.args.slice(0, 60)})`,
        });
    }
    if (i.keyword === 'SHELL')
      out.push({
        severity: 'medium',
        code: 'shell',
        message: `line ${i.line}: changes the program every later RUN step runs in (${i.args.slice(0, 60)})`,
      });
    if (i.keyword === 'ADD' && /https?:\/\//.test(i.args))
      out.push({
        severity: 'medium',
        code: 'remote-add',
        message: `line ${i.line}: ADD fetches from the network (${i.args.slice(0, 80)})`,
      });
  }
  return out;
}

function safeUrl(s: string): URL | undefined {
  try {
    return new URL(s);
  } catch {
    return undefined;
  }
}
const safeHost = (s: string) => safeUrl(s)?.hostname.replace(/^\[(.*)\]$/, '$1');

/**
 * Whether auto mode (`BB_SUPERVISE_AUTO=on`) may approve a request on its own: an
 * allowlist change in which the analyser finds nothing above `info` and nothing
 * beyond the operator's ceiling. Routes (where a key goes, and how far along its
 * API) and rebuilds (steps run on the host's engine) always wait for a person.
 */
export function autoApprovable(r: {
  kind: ProposalKind;
  findings: Finding[];
  beyondCeiling: string[];
}): boolean {
  return (
    r.kind === 'allowlist' &&
    r.beyondCeiling.length === 0 &&
    r.findings.every((f) => f.severity === 'info')
  );
}
