#!/usr/bin/env node
// bb-gate: a bottle's gate, its forge sidecar, supervise sidecar and proxies in
// one process (see runGateFromEnv). SIGHUP reloads the proxies' files; SIGTERM
// and SIGINT close every surface.
import { BbError, errorMessage } from '@bb/errors';
import { runGateFromEnv } from './gate-main';

try {
  const gate = await runGateFromEnv(process.env);
  process.stderr.write(
    `${JSON.stringify({ time: new Date().toISOString(), level: 'info', msg: 'gate serving', surfaces: gate.surfaces })}\n`,
  );
  process.on('SIGHUP', () => gate.reload());
  const stop = () => void gate.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} catch (err) {
  process.stderr.write(`bb-gate: ${errorMessage(err)}\n`);
  process.exit(err instanceof BbError && err.code === 'INVALID_INPUT' ? 2 : 1);
}
