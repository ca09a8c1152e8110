#!/usr/bin/env node
// bb-gate: a bottle's gate, its forge sidecar, supervise sidecar and proxies in
// one process (see runGateFromEnv). SIGHUP reloads the proxies' files; SIGTERM
// and SIGINT close every surface.
// With BB_GATE_BIND (a pooled bottle), it waits for that file's configuration first.
// bb-gate clone: clone the workspace a pod bottle launches with, then exit
// (see cloneWorkspaceFromEnv).
import { failedToStart, serveUntilStopped } from '@bb/egress';
import { awaitBind } from './gate-bind';
import { cloneWorkspaceFromEnv } from './gate-clone';
import { runGateFromEnv } from './gate-main';

const log = (msg: string, extra: Record<string, unknown> = {}) =>
  process.stderr.write(
    `${JSON.stringify({ time: new Date().toISOString(), level: 'info', msg, ...extra })}\n`,
  );

try {
  if (process.argv[2] === 'clone') {
    const head = await cloneWorkspaceFromEnv(process.env);
    log(head ? 'workspace cloned' : 'workspace kept: it was cloned before', { head });
    process.exit(0);
  }
  // A pooled bottle's gate waits for its issue's configuration first (gate-bind.ts).
  const gate = await runGateFromEnv(await awaitBind(process.env));
  log('gate serving', { surfaces: gate.surfaces });
  serveUntilStopped(gate);
} catch (err) {
  failedToStart('bb-gate', err);
}
