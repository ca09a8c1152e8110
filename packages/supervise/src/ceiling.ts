import { decide, parseRules } from '@bb/egress';
import type { ProposalKind } from './contract';
import type { Policy } from './policy';

type Routes = {
  routes: Array<{ prefix: string; upstream: string; headers: Record<string, string> }>;
};

function json<T>(text: string): T | undefined {
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

const host = (url: string) => {
  try {
    return new URL(url).hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  } catch {
    return '';
  }
};
/** Scheme, host and port: a key that went to https://h must not go to http://h:8080 unasked. */
const origin = (url: string) => {
  try {
    return new URL(url).origin.toLowerCase();
  } catch {
    return '';
  }
};

/**
 * Where a proposed file goes beyond the operator's ceiling, in words; empty
 * when it stays inside. What the bottle already has never counts against it.
 */
export function beyondCeiling(
  kind: ProposalKind,
  base: string,
  proposed: string,
  policy: Policy,
): string[] {
  if (kind === 'allowlist') {
    const before = new Set(
      (json<{ allow: string[] }>(base)?.allow ?? []).map((e) => e.trim().toLowerCase()),
    );
    const ceiling = parseRules(policy.egressCeiling);
    const out: string[] = [];
    for (const entry of json<{ allow: string[] }>(proposed)?.allow ?? []) {
      if (before.has(entry.trim().toLowerCase())) continue;
      const [rule] = parseRules([entry]);
      if (!rule) continue;
      const covered = rule.wildcard
        ? ceiling.some(
            (c) =>
              c.wildcard &&
              (rule.host === c.host || rule.host.endsWith(`.${c.host}`)) &&
              rule.ports.every((p) => c.ports.includes(p)),
          )
        : rule.ports.every((p) => decide(ceiling, rule.host, p).allowed);
      if (!covered)
        out.push(
          `${entry} is outside the egress ceiling (${policy.egressCeiling.join(', ') || 'empty'})`,
        );
    }
    return out;
  }
  if (kind === 'routes') {
    const had = new Set<string>();
    for (const r of json<Routes>(base)?.routes ?? [])
      for (const ref of Object.values(r.headers ?? {})) had.add(`${ref}@${origin(r.upstream)}`);
    const out: string[] = [];
    const origins = new Set((json<Routes>(base)?.routes ?? []).map((r) => origin(r.upstream)));
    const ceiling = parseRules(policy.egressCeiling);
    for (const r of json<Routes>(proposed)?.routes ?? []) {
      // A route is a way out of the bottle even without a secret: a new place it leads to
      // is held to the egress ceiling.
      if (!origins.has(origin(r.upstream))) {
        let u: URL | undefined;
        try {
          u = new URL(r.upstream);
        } catch {}
        const port = u ? Number(u.port || (u.protocol === 'https:' ? 443 : 80)) : 0;
        const refs = Object.values(r.headers ?? {});
        // A host the operator named for every secret the route carries is covered by that.
        const forItsSecrets =
          refs.length > 0 &&
          refs.every((ref) =>
            (policy.credentialHosts[ref.replace(/^env:/, '')] ?? []).includes(host(r.upstream)),
          );
        if (!u || (!forItsSecrets && !decide(ceiling, host(r.upstream), port).allowed))
          out.push(
            `route ${r.prefix} leads to ${origin(r.upstream)}, outside the egress ceiling (${policy.egressCeiling.join(', ') || 'empty'})`,
          );
      }
      for (const ref of Object.values(r.headers ?? {})) {
        const h = host(r.upstream);
        if (had.has(`${ref}@${origin(r.upstream)}`)) continue;
        const name = ref.replace(/^env:/, '');
        const allowed = policy.credentialHosts[name] ?? [];
        if (!allowed.includes(h))
          out.push(
            `route ${r.prefix} would send ${ref} to ${h}; the ceiling lets it go to ${allowed.join(', ') || 'no new host'}`,
          );
      }
    }
    return out;
  }
  return [];
}
