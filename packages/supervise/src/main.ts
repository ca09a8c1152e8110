import { BbError } from '@bb/errors';
import { z } from 'zod';
import { type RunningSuperviseServer, serveSupervise } from './server';
import { SuperviseSidecar } from './sidecar';

const PolicyEnv = z
  .object({
    allowedBases: z.array(z.string()).optional(),
    ttlMs: z.number().nonnegative().optional(),
    waitMs: z.number().nonnegative().optional(),
    coolDownAfter: z.number().nonnegative().optional(),
    coolDownMs: z.number().nonnegative().optional(),
    /** Kinds the platform cannot apply, with why (`SuperviseSidecarOptions.refused`). */
    refused: z
      .object({
        routes: z.string().optional(),
        allowlist: z.string().optional(),
        dockerfile: z.string().optional(),
      })
      .strict()
      .optional(),
  })
  .strict();

/**
 * Start a bottle's supervise sidecar from its environment, as the
 * `bb-supervise-sidecar` command does (and a bottle's gate, which runs it beside
 * its other surfaces in one process): `BB_SUPERVISE_SOCKET`, `BB_SUPERVISE_DIR`,
 * `BB_CURRENT_CONFIG`, `BB_SLUG`, and optionally `BB_SUPERVISE_POLICY` (JSON)
 * and `BB_SOCKET_MODE` (octal).
 */
export async function runSuperviseFromEnv(
  env: Record<string, string | undefined>,
  log: (line: Record<string, unknown>) => void = (line) =>
    process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...line })}\n`),
): Promise<RunningSuperviseServer> {
  const need = ['BB_SUPERVISE_SOCKET', 'BB_SUPERVISE_DIR', 'BB_CURRENT_CONFIG', 'BB_SLUG'];
  const missing = need.filter((n) => !env[n]);
  if (missing.length)
    throw new BbError(
      'INVALID_INPUT',
      `the supervise sidecar needs ${missing.join(', ')} in its environment`,
    );
  let raw: unknown;
  try {
    raw = JSON.parse(env['BB_SUPERVISE_POLICY'] ?? '{}');
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `BB_SUPERVISE_POLICY is not JSON: ${(err as Error).message}`,
    );
  }
  const parsed = PolicyEnv.safeParse(raw);
  if (!parsed.success)
    throw new BbError(
      'INVALID_INPUT',
      `BB_SUPERVISE_POLICY: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  const mode = env['BB_SOCKET_MODE'] ?? '600';
  if (!/^[0-7]{3}$/.test(mode))
    throw new BbError(
      'INVALID_INPUT',
      `BB_SOCKET_MODE ${JSON.stringify(mode)} must be three octal digits, e.g. 600`,
    );
  const policy = parsed.data;
  const sidecar = new SuperviseSidecar({
    slug: env['BB_SLUG']!,
    dir: env['BB_SUPERVISE_DIR']!,
    currentConfig: env['BB_CURRENT_CONFIG']!,
    allowedBases: policy.allowedBases ?? [],
    ...(policy.ttlMs ? { ttlMs: policy.ttlMs } : {}),
    ...(policy.waitMs !== undefined ? { waitMs: policy.waitMs } : {}),
    ...(policy.coolDownAfter ? { coolDownAfter: policy.coolDownAfter } : {}),
    ...(policy.coolDownMs ? { coolDownMs: policy.coolDownMs } : {}),
    ...(policy.refused ? { refused: policy.refused } : {}),
  });
  sidecar.exchange.ensure();
  return serveSupervise(sidecar, env['BB_SUPERVISE_SOCKET']!, {
    mode: Number.parseInt(mode, 8),
    log,
  });
}
