import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
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
  /** See `EgressProxyOptions.tunnelProgram`. */
  tunnelProgram?: string | false | undefined;
  /** Where `env:NAME` secret references are looked up. @default process.env */
  env?: Record<string, string | undefined>;
  /**
   * A JSON file `{ "NAME": "value" }` of secrets, read once at start and kept
   * in this process only (the file can go as soon as the sockets are up); its
   * names win over `env`.
   */
  secretsFile?: string | undefined;
  onMessage?: (message: string) => void;
  /**
   * Where each reload's outcome is written (`{ generation, rules, routes, at }`),
   * so whoever asked for it knows it took. The generation is read from a
   * `generation` file beside the rules file.
   */
  statusFile?: string | undefined;
  /**
   * Resolve every secret reference from `env` and the secrets file only: a
   * `file:/path` reference is looked up there under its whole reference, never
   * read from this process's filesystem. A bottle's gate runs so, beside files
   * its routes must not reach. @default false
   */
  secretsOnly?: boolean | undefined;
}

export interface ReloadStatus {
  generation: string | null;
  /** `ok`, or why the old configuration was kept. */
  rules: string;
  routes: string;
  at: string;
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
  // Secrets added later (a route the operator approved names a new one) arrive in
  // the same file before a reload; it is read again then, and removed by the host.
  const moreSecrets = () => {
    if (options.secretsFile && existsSync(options.secretsFile))
      Object.assign(env, readSecrets(options.secretsFile));
  };
  const log = fileLogger(options.logFile, { maxBytes: options.logMaxBytes });
  const canLog = () => !log.full;
  const egress = createEgressProxy({
    rules: readRules(options.rulesFile),
    log,
    canLog,
    reserve: () => log.reserve(),
    ...(options.tunnelProgram === undefined ? {} : { tunnelProgram: options.tunnelProgram }),
  });
  const cred = createCredentialProxy({
    routes: loadRoutes(options.routesFile, env, { secretsOnly: options.secretsOnly }),
    log,
    canLog,
    reserve: () => log.reserve(),
  });
  for (const [server, socket] of [
    [egress.server, options.egressSocket],
    [cred.server, options.credSocket],
  ] as const) {
    rmSync(socket, { force: true });
    await listenUnixSocket(server, socket, { mode: 0o666 });
  }
  const reload = (): ReloadStatus => {
    const status: ReloadStatus = {
      generation: readGeneration(options.rulesFile),
      rules: 'ok',
      routes: 'ok',
      at: '',
    };
    try {
      egress.reload(readRules(options.rulesFile));
      say(`egress rules reloaded from ${options.rulesFile}`);
    } catch (err) {
      status.rules = errorMessage(err);
      say(`egress rules NOT reloaded, keeping the old ones: ${status.rules}`);
    }
    try {
      moreSecrets();
      cred.reload(loadRoutes(options.routesFile, env, { secretsOnly: options.secretsOnly }));
      say(`credential routes reloaded from ${options.routesFile}`);
    } catch (err) {
      status.routes = errorMessage(err);
      say(`credential routes NOT reloaded, keeping the old ones: ${status.routes}`);
    }
    status.at = new Date().toISOString();
    if (options.statusFile)
      try {
        writeFileSync(`${options.statusFile}.tmp`, `${JSON.stringify(status)}\n`);
        renameSync(`${options.statusFile}.tmp`, options.statusFile);
      } catch (err) {
        say(`could not write the reload status: ${errorMessage(err)}`);
      }
    return status;
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

/** The generation the host asked for, from `generation` beside the rules file. */
function readGeneration(rulesFile: string): string | null {
  try {
    return (
      readFileSync(join(dirname(rulesFile), 'generation'), 'utf8')
        .trim()
        .slice(0, 64) || null
    );
  } catch {
    return null;
  }
}
