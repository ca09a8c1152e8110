#!/usr/bin/env node
// bb-supervise-sidecar: a bottle's supervise sidecar (see SuperviseSidecar).
//   BB_SUPERVISE_SOCKET BB_SUPERVISE_DIR BB_CURRENT_CONFIG BB_SLUG [BB_SUPERVISE_POLICY] [BB_SOCKET_MODE]
import { errorMessage, isBbError } from '@bb/errors';
import { runSuperviseFromEnv } from './main';

try {
  const running = await runSuperviseFromEnv(process.env);
  const stop = () => void running.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} catch (err) {
  process.stderr.write(`bb-supervise-sidecar: ${errorMessage(err)}\n`);
  process.exit(isBbError(err, 'INVALID_INPUT') ? 2 : 1);
}
