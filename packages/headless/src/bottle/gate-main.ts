import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { runProxiesFromEnv } from '@bb/egress';
import { type GateSurface, startGateLink } from '@bb/egress/bridge';
import { BbError, isBbError } from '@bb/errors';
import { runSidecarFromEnv } from '@bb/forge-sidecar';
import { runSuperviseFromEnv } from '@bb/supervise';

/** A surface of the gate: something serving the agent on a socket of its own. */
interface Surface {
  name: 'forge' | 'supervise' | 'proxies';
  close(): Promise<void>;
  reload?(): void;
}

/** The surfaces a gate serves, from its environment. */
export function gateSurfaces(
  env: Record<string, string | undefined>,
): Array<'forge' | 'supervise' | 'proxies'> {
  return [
    ...(env['BB_SIDECAR_SOCKET'] ? (['forge'] as const) : []),
    ...(env['BB_SUPERVISE_SOCKET'] ? (['supervise'] as const) : []),
    ...(env['BB_EGRESS_SOCKET'] ? (['proxies'] as const) : []),
  ];
}

export interface RunningGate {
  surfaces: Array<Surface['name']>;
  /** Re-read the proxies' rules and routes (SIGHUP). */
  reload(): void;
  close(): Promise<void>;
}

/**
 * A bottle's gate: one process serving the agent its forge sidecar
 * (`BB_SIDECAR_SOCKET` and the sidecar's variables), its supervise sidecar
 * (`BB_SUPERVISE_SOCKET` …) and its egress and credential proxies
 * (`BB_EGRESS_SOCKET` …), each present when its socket is named. Each surface
 * is its own module on its own socket, configured exactly as its standalone
 * command is; they share the process, so a bottle costs one gate container
 * instead of three. With `BB_GATE_PORT` (a pod's gate, whose agent is in another
 * pod) they are also served on that TCP port, each connection naming its surface
 * (`startGateLink`). The proxies resolve secret references from their secrets
 * file only: never from this process's environment, nor from a file the gate can
 * read (its forge token's is one). When one surface fails to
 * start, those already up are closed and the error is thrown.
 */
export async function runGateFromEnv(
  env: Record<string, string | undefined>,
): Promise<RunningGate> {
  const names = gateSurfaces(env);
  if (names.length === 0)
    throw new BbError(
      'INVALID_INPUT',
      'the gate serves nothing: name BB_SIDECAR_SOCKET, BB_SUPERVISE_SOCKET or BB_EGRESS_SOCKET',
    );
  const start = (name: Surface['name']): Promise<Surface> => {
    switch (name) {
      case 'forge':
        return runSidecarFromEnv({ env }).then((s) => ({ name, close: () => s.close() }));
      case 'supervise':
        return runSuperviseFromEnv(env, (line) =>
          process.stderr.write(
            `${JSON.stringify({ time: new Date().toISOString(), surface: 'supervise', ...line })}\n`,
          ),
        ).then((s) => ({ name, close: () => s.close() }));
      case 'proxies':
        return runProxiesFromEnv(env, { secretsOnly: true }).then((p) => ({
          name,
          close: () => p.close(),
          reload: () => p.reload(),
        }));
    }
  };
  const settled = await Promise.allSettled(names.map(start));
  const up = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = settled.findIndex((s) => s.status === 'rejected');
  if (failed >= 0) {
    await Promise.allSettled(up.map((s) => s.close()));
    const reason = (settled[failed] as PromiseRejectedResult).reason as Error;
    throw new BbError(
      isBbError(reason) ? reason.code : 'BACKEND_ERROR',
      `the gate's ${names[failed]} surface did not start: ${reason.message}`,
      { cause: reason },
    );
  }
  // In a pod the agent is not beside the sockets: they are served on one TCP port too.
  const port = env['BB_GATE_PORT'];
  let link: Awaited<ReturnType<typeof startGateLink>> | undefined;
  if (port) {
    const sockets: Partial<Record<GateSurface, string>> = {
      ...(env['BB_SIDECAR_SOCKET'] ? { forge: env['BB_SIDECAR_SOCKET'] } : {}),
      ...(env['BB_SUPERVISE_SOCKET'] ? { supervise: env['BB_SUPERVISE_SOCKET'] } : {}),
      ...(env['BB_EGRESS_SOCKET'] ? { egress: env['BB_EGRESS_SOCKET'] } : {}),
      ...(env['BB_CRED_SOCKET'] ? { credentials: env['BB_CRED_SOCKET'] } : {}),
    };
    try {
      if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)
        throw new BbError('INVALID_INPUT', `BB_GATE_PORT ${JSON.stringify(port)} is not a port`);
      const keyFile = env['BB_GATE_KEY_FILE'];
      if (!keyFile)
        throw new BbError(
          'INVALID_INPUT',
          "BB_GATE_PORT needs BB_GATE_KEY_FILE: the bottle's key, which its agent's connections must give",
        );
      let key: string;
      try {
        key = readFileSync(keyFile, 'utf8').trim();
      } catch (err) {
        throw new BbError(
          'INVALID_INPUT',
          `BB_GATE_KEY_FILE ${keyFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
        );
      }
      link = await startGateLink({ port: Number(port), surfaces: sockets, key });
    } catch (err) {
      await Promise.allSettled(up.map((s) => s.close()));
      throw err;
    }
  }
  const reload = () => {
    for (const s of up) s.reload?.();
  };
  // Where nothing can signal the gate (a pod, which nobody execs into), it watches the
  // generation its proxies' files are written with, and reloads when it changes.
  const watch = env['BB_PROXY_WATCH_MS'];
  let watcher: NodeJS.Timeout | undefined;
  if (watch && env['BB_EGRESS_RULES']) {
    const every = Number(watch);
    if (!Number.isInteger(every) || every < 50 || every > 60_000) {
      link?.close();
      await Promise.allSettled(up.map((s) => s.close()));
      throw new BbError(
        'INVALID_INPUT',
        `BB_PROXY_WATCH_MS ${JSON.stringify(watch)} must be milliseconds, 50 to 60000`,
      );
    }
    const file = join(dirname(env['BB_EGRESS_RULES']), 'generation');
    const read = () => {
      try {
        return readFileSync(file, 'utf8').trim();
      } catch {
        return '';
      }
    };
    // Nothing taken as seen at start: a generation written while the pod started is
    // reloaded (and its status written) on the first look, so the host hears it took.
    let seen = '';
    watcher = setInterval(() => {
      const now = read();
      if (now && now !== seen) {
        seen = now;
        reload();
      }
    }, every);
    watcher.unref();
  }
  return {
    surfaces: names,
    reload,
    close: async () => {
      if (watcher) clearInterval(watcher);
      // New connections stop; those open end with the process.
      link?.close();
      await Promise.allSettled(up.map((s) => s.close()));
    },
  };
}
