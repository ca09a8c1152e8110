#!/usr/bin/env node
// bb-egress: run the egress and credential proxies for one bottle.
//   BB_EGRESS_RULES=rules.json BB_CRED_ROUTES=routes.json BB_EGRESS_SOCKET=... BB_CRED_SOCKET=... BB_EGRESS_LOG=... bb-egress
// SIGHUP reloads both files (a bad file keeps the old configuration).
import { errorMessage, isBbError } from '@bb/errors';
import { runProxiesFromEnv } from './proxies-main';

try {
  const p = await runProxiesFromEnv(process.env);
  process.on('SIGHUP', () => p.reload());
  const stop = () => void p.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} catch (err) {
  process.stderr.write(`bb-egress: ${errorMessage(err)}\n`);
  process.exit(isBbError(err, 'INVALID_INPUT') ? 2 : 1);
}
