#!/usr/bin/env node
// bb-supervise-sidecar: a bottle's supervise sidecar (see SuperviseSidecar).
//   BB_SUPERVISE_SOCKET BB_SUPERVISE_DIR BB_CURRENT_CONFIG BB_SLUG [BB_SUPERVISE_POLICY] [BB_SOCKET_MODE]
import { errorMessage } from '@bb/errors';
import { serveSupervise } from './server';
import { SuperviseSidecar } from './sidecar';

const need = (name: string) => {
  const v = process.env[name];
  if (!v) {
    process.stderr.write(`bb-supervise-sidecar: ${name} is required\n`);
    process.exit(2);
  }
  return v;
};
try {
  const policy = JSON.parse(process.env['BB_SUPERVISE_POLICY'] ?? '{}') as {
    allowedBases?: string[];
    ttlMs?: number;
    waitMs?: number;
    coolDownAfter?: number;
    coolDownMs?: number;
  };
  const sidecar = new SuperviseSidecar({
    slug: need('BB_SLUG'),
    dir: need('BB_SUPERVISE_DIR'),
    currentConfig: need('BB_CURRENT_CONFIG'),
    allowedBases: policy.allowedBases ?? [],
    ...(policy.ttlMs ? { ttlMs: policy.ttlMs } : {}),
    ...(policy.waitMs !== undefined ? { waitMs: policy.waitMs } : {}),
    ...(policy.coolDownAfter ? { coolDownAfter: policy.coolDownAfter } : {}),
    ...(policy.coolDownMs ? { coolDownMs: policy.coolDownMs } : {}),
  });
  sidecar.exchange.ensure();
  const running = await serveSupervise(sidecar, need('BB_SUPERVISE_SOCKET'), {
    mode: Number.parseInt(process.env['BB_SOCKET_MODE'] ?? '600', 8),
    log: (line) =>
      process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...line })}\n`),
  });
  const stop = () => void running.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
} catch (err) {
  process.stderr.write(`bb-supervise-sidecar: ${errorMessage(err)}\n`);
  process.exit(1);
}
