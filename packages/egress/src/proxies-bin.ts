#!/usr/bin/env node
// bb-egress: run the egress and credential proxies for one bottle.
//   BB_EGRESS_RULES=rules.json BB_CRED_ROUTES=routes.json BB_EGRESS_SOCKET=... BB_CRED_SOCKET=... BB_EGRESS_LOG=... bb-egress
// SIGHUP reloads both files (a bad file keeps the old configuration).
import { failedToStart, serveUntilStopped } from './daemon';
import { runProxiesFromEnv } from './proxies-main';

try {
  serveUntilStopped(await runProxiesFromEnv(process.env));
} catch (err) {
  failedToStart('bb-egress', err);
}
