/** Header names whose values are credentials and never appear in logs or errors. */
export const SECRET_HEADER_NAMES: ReadonlySet<string> = new Set([
  'authorization',
  'proxy-authorization',
  'x-api-key',
  'api-key',
  'cookie',
  'set-cookie',
  'x-gitea-signature',
  'x-hub-signature',
  'x-hub-signature-256',
  'x-forgejo-signature',
  'x-gogs-signature',
]);

const REDACTED = '[REDACTED]';
const registered = new Set<string>();

/**
 * Register a secret value (a token, a key) of this process, so every later
 * `redactString` call removes it wherever it appears. Values shorter than 8
 * characters are not registered: they would redact ordinary words.
 */
export function registerSecret(value: string | undefined): void {
  if (value && value.length >= 8) registered.add(value);
}

/**
 * Register a connection URL as a secret: the URL itself, its password, and any
 * `password`/`sslpassword` parameter (a database URL carries its credentials).
 */
export function registerUrlSecrets(url: string | undefined): void {
  if (!url) return;
  registerSecret(url);
  try {
    const u = new URL(url);
    if (u.password) registerSecret(decodeURIComponent(u.password));
    for (const name of ['password', 'sslpassword'])
      registerSecret(u.searchParams.get(name) ?? undefined);
  } catch {
    // Not a URL: whoever opens it says so; the whole string is registered.
  }
}

// Credentials that look like credentials even when nobody registered them.
const PATTERNS: RegExp[] = [
  /\b(token|bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi,
  /([?&](?:token|access_token|api_key|key)=)[^&\s"']+/gi,
  // user:password@ in any scheme's URL (https://, postgres://, ...).
  /([a-z][a-z0-9+.-]*:\/\/)[^/\s:@]+:[^/\s@]+@/gi,
  // GitHub's tokens (installation, personal, OAuth, refresh; fine-grained) and JSON web
  // tokens (a GitHub App's): made by the hour, so never registered one by one.
  /\b(?:gh[opsur]_[A-Za-z0-9_-]{20,}|github_pat_[A-Za-z0-9_]{20,}|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,})/g,
];

/** Remove registered secrets and credential-shaped substrings from a string. */
export function redactString(text: string): string {
  let out = text;
  for (const secret of registered) {
    if (out.includes(secret)) out = out.split(secret).join(REDACTED);
  }
  out = out.replace(PATTERNS[0]!, (_m, scheme: string) => `${scheme} ${REDACTED}`);
  out = out.replace(PATTERNS[1]!, (_m, prefix: string) => `${prefix}${REDACTED}`);
  out = out.replace(PATTERNS[2]!, (_m, scheme: string) => `${scheme}${REDACTED}@`);
  out = out.replace(PATTERNS[3]!, REDACTED);
  return out;
}

/**
 * A deep copy of `value` with credential header values and registered secrets
 * replaced. Safe to log.
 */
export function redact<T>(value: T): T {
  return walk(value, 0) as T;
}

function walk(value: unknown, depth: number): unknown {
  if (depth > 20) return '[…]';
  if (typeof value === 'string') return redactString(value);
  if (Array.isArray(value)) return value.map((v) => walk(v, depth + 1));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      out[k] =
        SECRET_HEADER_NAMES.has(k.toLowerCase()) || /token|secret|password/i.test(k)
          ? REDACTED
          : walk(v, depth + 1);
    }
    return out;
  }
  return value;
}
