#!/usr/bin/env node
// bb-bridge 3128=/run/bb/egress.sock 3129=/run/bb/cred.sock
// With BB_BRIDGE_READY=<file>, creates that file once every port listens.
import { writeFileSync } from 'node:fs';
import { parseBridgeArgs, startBridge } from './bridge';

try {
  await startBridge(parseBridgeArgs(process.argv.slice(2)));
  const ready = process.env['BB_BRIDGE_READY'];
  if (ready) writeFileSync(ready, `${process.pid}\n`);
} catch (err) {
  process.stderr.write(`bb-bridge: ${(err as Error).message}\n`);
  process.exit(2);
}
