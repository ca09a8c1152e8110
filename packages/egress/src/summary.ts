import type { EgressLogEntry } from './log';

/** The "egress" section of a run record. */
export interface EgressSummary {
  allowed: Array<{
    host: string;
    port: number;
    rule: string;
    connections: number;
    bytesUp: number;
    bytesDown: number;
  }>;
  denied: Array<{ host: string; port: number; reason: string; count: number }>;
  credentialRoutes: Array<{
    route: string;
    auth: string[];
    requests: number;
    bytesUp: number;
    bytesDown: number;
  }>;
  totals: { connections: number; denied: number; bytesUp: number; bytesDown: number };
}

/** An egress or credential-proxy log's lines as entries; unreadable lines are skipped. */
export function parseEgressLog(text: string): EgressLogEntry[] {
  return text.split('\n').flatMap((l) => {
    try {
      return l.trim() ? [JSON.parse(l) as EgressLogEntry] : [];
    } catch {
      return [];
    }
  });
}

/** Summarise egress and credential-proxy log entries (JSON lines or parsed). Unreadable lines are skipped. */
export function summarizeEgress(input: string | EgressLogEntry[]): EgressSummary {
  const entries = typeof input === 'string' ? parseEgressLog(input) : input;
  const allowed = new Map<string, EgressSummary['allowed'][number]>();
  const denied = new Map<string, EgressSummary['denied'][number]>();
  const creds = new Map<string, EgressSummary['credentialRoutes'][number]>();
  const totals = { connections: 0, denied: 0, bytesUp: 0, bytesDown: 0 };
  for (const e of entries) {
    if (e.decision === 'denied') {
      totals.denied++;
      const k = `${e.host}:${e.port}:${e.rule}`;
      const d = denied.get(k) ?? { host: e.host, port: e.port, reason: e.rule, count: 0 };
      d.count++;
      denied.set(k, d);
      continue;
    }
    totals.connections++;
    totals.bytesUp += e.bytesUp;
    totals.bytesDown += e.bytesDown;
    if (e.kind === 'credential') {
      const k = e.route ?? e.rule;
      const c = creds.get(k) ?? {
        route: k,
        auth: e.auth ?? [],
        requests: 0,
        bytesUp: 0,
        bytesDown: 0,
      };
      c.requests++;
      c.bytesUp += e.bytesUp;
      c.bytesDown += e.bytesDown;
      creds.set(k, c);
    } else {
      const k = `${e.host}:${e.port}`;
      const a = allowed.get(k) ?? {
        host: e.host,
        port: e.port,
        rule: e.rule,
        connections: 0,
        bytesUp: 0,
        bytesDown: 0,
      };
      a.connections++;
      a.bytesUp += e.bytesUp;
      a.bytesDown += e.bytesDown;
      allowed.set(k, a);
    }
  }
  const byName = <T extends { host?: string; route?: string }>(xs: T[]) =>
    xs.sort((a, b) => String(a.host ?? a.route).localeCompare(String(b.host ?? b.route)));
  return {
    allowed: byName([...allowed.values()]),
    denied: byName([...denied.values()]),
    credentialRoutes: byName([...creds.values()]),
    totals,
  };
}
