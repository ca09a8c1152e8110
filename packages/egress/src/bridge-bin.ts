#!/usr/bin/env node
// bb-bridge 3128=/run/bb/egress.sock 3129=/run/bb/cred.sock
import { parseBridgeArgs, startBridge } from './bridge';

try {
  await startBridge(parseBridgeArgs(process.argv.slice(2)));
} catch (err) {
  process.stderr.write(`bb-bridge: ${(err as Error).message}\n`);
  process.exit(2);
}
