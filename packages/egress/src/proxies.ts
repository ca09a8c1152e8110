import { readFileSync, rmSync } from 'node:fs';
import { errorMessage, registerSecret } from '@bb/errors';
import { listenUnixSocket } from '@bb/wall';
import { createCredentialProxy, loadRoutes } from './cred-proxy';
import { createEgressProxy } from './egress-proxy';
import { fileLogger } from './log';
import { parseRules } from './rules';

export interface ProxiesOptions {
  /** JSON file: `{ "allow": ["host", "*.suffix:443", ...] }`. */
  rulesFile: string;
  /** JSON routes file for the credential proxy. */
  routesFile: string;
  egressSocket: string;
  credSocket: string;
  logFile: string;
  /** The log's size limit: past it, requests are refused. @default 64 MiB */
  logMaxBytes?: number | undefined;
  /** Where `env:NAME` secret references are looked up. @default process.env */
  env?: Record<string, string | undefined>;
  /**
   * A JSON file `{ "NAME": "value" }` of secrets, read once at start and kept
   * in this process only (the file can go as soon as the sockets are up); its
   * names win over `env`.
   */
  secretsFile?: string | undefined;
  onMessage?: (message: string) => void;
}

function readRules(file: string) {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as { allow?: unknown };
  if (!Array.isArray(raw.allow) || !raw.allow.every((x) => typeof x === 'string')) {
    throw new Error(`${file} must be {"allow": ["host", ...]}`);
  }
  return parseRules(raw.allow as string[]);
}

function readSecrets(file: string | undefined): Record<string, string> {
  if (!file) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`secrets file ${file} cannot be read as JSON: ${(err as Error).message}`);
  }
  if (
    typeof parsed !== 'object' ||
    parsed === null ||
    Object.values(parsed).some((v) => typeof v !== 'string')
  )
    throw new Error(`secrets file ${file} must be {"NAME": "value", ...}`);
  for (const v of Object.values(parsed as Record<string, string>)) registerSecret(v);
  return parsed as Record<string, string>;
}

/**
 * Run both proxies on their Unix sockets. `reload()` (wired to SIGHUP by the
 * command) re-reads both files; a file that fails to load leaves that proxy's
 * current configuration in place and says why.
 */
export async function startProxies(options: ProxiesOptions) {
  const say = options.onMessage ?? ((m: string) => process.stderr.write(`${m}\n`));
  const env = { ...(options.env ?? process.env), ...readSecrets(options.secretsFile) };
  const log = fileLogger(options.logFile, { maxBytes: options.logMaxBytes });
  const canLog = () => !log.full;
  const egress = createEgressProxy({
    rules: readRules(options.rulesFile),
    log,
    canLog,
    reserve: () => log.reserve(),
  });
  const cred = createCredentialProxy({ routes: loadRoutes(options.routesFile, env), log, canLog });
  for (const [server, socket] of [
    [egress.server, options.egressSocket],
    [cred.server, options.credSocket],
  ] as const) {
    rmSync(socket, { force: true });
    await listenUnixSocket(server, socket, { mode: 0o666 });
  }
  const reload = () => {
    try {
      egress.reload(readRules(options.rulesFile));
      say(`egress rules reloaded from ${options.rulesFile}`);
    } catch (err) {
      say(`egress rules NOT reloaded, keeping the old ones: ${errorMessage(err)}`);
    }
    try {
      cred.reload(loadRoutes(options.routesFile, env));
      say(`credential routes reloaded from ${options.routesFile}`);
    } catch (err) {
      say(`credential routes NOT reloaded, keeping the old ones: ${errorMessage(err)}`);
    }
  };
  return {
    egress,
    cred,
    reload,
    close: async () => {
      await Promise.all([egress.close(), cred.close()]);
      for (const socket of [options.egressSocket, options.credSocket])
        rmSync(socket, { force: true });
      log.close();
    },
  };
}
