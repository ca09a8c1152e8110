import { BbError } from '@bb/errors';
import { startProxies } from './proxies';

/** What `runProxiesFromEnv` reads; see the `bb-egress` command. */
const REQUIRED = [
  'BB_EGRESS_RULES',
  'BB_CRED_ROUTES',
  'BB_EGRESS_SOCKET',
  'BB_CRED_SOCKET',
  'BB_EGRESS_LOG',
] as const;

/**
 * Start the egress and credential proxies from their environment, as the
 * `bb-egress` command does (and a bottle's gate, which runs them beside its
 * other surfaces in one process): `BB_EGRESS_RULES`, `BB_CRED_ROUTES`,
 * `BB_EGRESS_SOCKET`, `BB_CRED_SOCKET`, `BB_EGRESS_LOG`, and optionally
 * `BB_CRED_SECRETS_FILE`, `BB_PROXY_STATUS`, `BB_EGRESS_LOG_MAX`, and `BB_TUNNEL`
 * (the bb-tunnel program that carries allowed tunnels; empty: node carries them).
 */
export async function runProxiesFromEnv(
  env: Record<string, string | undefined>,
  options: {
    /**
     * Resolve references from the secrets file only: `env:NAME` is never looked up in
     * this process's environment, nor `file:/path` read from its filesystem (see
     * `ProxiesOptions.secretsOnly`). @default false
     */
    secretsOnly?: boolean;
  } = {},
) {
  const missing = REQUIRED.filter((n) => !env[n]);
  if (missing.length)
    throw new BbError('INVALID_INPUT', `bb-egress needs ${missing.join(', ')} in its environment`);
  const max = env['BB_EGRESS_LOG_MAX'];
  if (max !== undefined && !/^[1-9]\d*$/.test(max))
    throw new BbError(
      'INVALID_INPUT',
      `BB_EGRESS_LOG_MAX ${JSON.stringify(max)} must be a whole number of bytes`,
    );
  return startProxies({
    rulesFile: env['BB_EGRESS_RULES']!,
    routesFile: env['BB_CRED_ROUTES']!,
    egressSocket: env['BB_EGRESS_SOCKET']!,
    credSocket: env['BB_CRED_SOCKET']!,
    logFile: env['BB_EGRESS_LOG']!,
    env: options.secretsOnly ? {} : env,
    secretsOnly: options.secretsOnly,
    secretsFile: env['BB_CRED_SECRETS_FILE'],
    statusFile: env['BB_PROXY_STATUS'],
    logMaxBytes: max ? Number(max) : undefined,
    tunnelProgram: env['BB_TUNNEL'] === '' ? false : env['BB_TUNNEL'],
  });
}
