#!/usr/bin/env node
// bb-egress: run the egress and credential proxies for one bottle.
//   BB_EGRESS_RULES=rules.json BB_CRED_ROUTES=routes.json BB_EGRESS_SOCKET=... BB_CRED_SOCKET=... BB_EGRESS_LOG=... bb-egress
// SIGHUP reloads both files (a bad file keeps the old configuration).
import { errorMessage } from '@bb/errors';
import { startProxies } from './proxies';

const need = (name: string) => {
  const v = process.env[name];
  if (!v) {
    process.stderr.write(`bb-egress: ${name} is required\n`);
    process.exit(2);
  }
  return v;
};
try {
  const p = await startProxies({
    rulesFile: need('BB_EGRESS_RULES'),
    routesFile: need('BB_CRED_ROUTES'),
    egressSocket: need('BB_EGRESS_SOCKET'),
    credSocket: need('BB_CRED_SOCKET'),
    logFile: need('BB_EGRESS_LOG'),
    secretsFile: process.env['BB_CRED_SECRETS_FILE'],
    statusFile: process.env['BB_PROXY_STATUS'],
    logMaxBytes: process.env['BB_EGRESS_LOG_MAX']
      ? Number(process.env['BB_EGRESS_LOG_MAX'])
      : undefined,
  });
  process.on('SIGHUP', () => p.reload());
  const stop = () => void p.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} catch (err) {
  process.stderr.write(`bb-egress: ${errorMessage(err)}\n`);
  process.exit(1);
}
