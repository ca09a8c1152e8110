import { chmodSync, readFileSync, rmSync } from 'node:fs';
import { errorMessage } from '@bb/errors';
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
  env?: Record<string, string | undefined>;
  onMessage?: (message: string) => void;
}

function readRules(file: string) {
  const raw = JSON.parse(readFileSync(file, 'utf8')) as { allow?: unknown };
  if (!Array.isArray(raw.allow) || !raw.allow.every((x) => typeof x === 'string')) {
    throw new Error(`${file} must be {"allow": ["host", ...]}`);
  }
  return parseRules(raw.allow as string[]);
}

/**
 * Run both proxies on their Unix sockets. `reload()` (wired to SIGHUP by the
 * command) re-reads both files; a file that fails to load leaves that proxy's
 * current configuration in place and says why.
 */
export async function startProxies(options: ProxiesOptions) {
  const say = options.onMessage ?? ((m: string) => process.stderr.write(`${m}\n`));
  const log = fileLogger(options.logFile);
  const egress = createEgressProxy({ rules: readRules(options.rulesFile), log });
  const cred = createCredentialProxy({ routes: loadRoutes(options.routesFile, options.env), log });
  for (const [server, socket] of [
    [egress.server, options.egressSocket],
    [cred.server, options.credSocket],
  ] as const) {
    rmSync(socket, { force: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(socket, () => resolve());
    });
    chmodSync(socket, 0o666);
  }
  const reload = () => {
    try {
      egress.reload(readRules(options.rulesFile));
      say(`egress rules reloaded from ${options.rulesFile}`);
    } catch (err) {
      say(`egress rules NOT reloaded, keeping the old ones: ${errorMessage(err)}`);
    }
    try {
      cred.reload(loadRoutes(options.routesFile, options.env));
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
      log.close();
    },
  };
}
