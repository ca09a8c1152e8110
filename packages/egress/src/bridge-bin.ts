#!/usr/bin/env node
// bb-bridge 3128=/run/bb/egress.sock 3129=/run/bb/cred.sock
// bb-bridge /tmp/bb/forge.sock=gate:forge 3128=gate:egress -- claude -p ...
//   (in a pod: gate:SURFACE is the gate at $BB_GATE, keyed with $BB_GATE_KEY; the command runs once every
//   bridge listens, and the bridge exits with it, passing SIGTERM and SIGINT on)
// With BB_BRIDGE_READY=<file>, creates that file once every bridge listens.
// A port mapped to a socket is served by bb-relay (C; beside this file, or BB_RELAY;
//   BB_RELAY= turns it off), or by this process when it cannot: see startBridge.
// With BB_HOME_FILES (JSON: path under $HOME → text), writes those files into the
//   home first (a pod's turn: the CLI's settings, the script agent's script).
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseBridgeArgs, startBridge, writeHomeFiles } from './bridge';

const beside = fileURLToPath(new URL('./bb-relay', import.meta.url));
const nativeRelay = process.env['BB_RELAY'] ?? (existsSync(beside) ? beside : '');

const argv = process.argv.slice(2);
const dash = argv.indexOf('--');
const [mappings, command] = dash < 0 ? [argv, []] : [argv.slice(0, dash), argv.slice(dash + 1)];
try {
  const files = process.env['BB_HOME_FILES'];
  if (files) writeHomeFiles(process.env['HOME'] ?? '', files);
  await startBridge(
    parseBridgeArgs(mappings, { address: process.env['BB_GATE'], key: process.env['BB_GATE_KEY'] }),
    { nativeRelay, onMessage: (m) => process.stderr.write(`bb-bridge: ${m}\n`) },
  );
  const ready = process.env['BB_BRIDGE_READY'];
  if (ready) writeFileSync(ready, `${process.pid}\n`);
} catch (err) {
  process.stderr.write(`bb-bridge: ${(err as Error).message}\n`);
  process.exit(2);
}
if (command.length > 0) {
  // What the bridge alone needs stays with it.
  const { BB_GATE_KEY: _key, BB_HOME_FILES: _files, BB_RELAY: _relay, ...env } = process.env;
  const child = spawn(command[0]!, command.slice(1), { stdio: 'inherit', env });
  for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, () => child.kill(sig));
  child.on('error', (err) => {
    process.stderr.write(`bb-bridge: ${command[0]} could not start: ${err.message}\n`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => process.exit(code ?? (signal === 'SIGKILL' ? 137 : 143)));
}
