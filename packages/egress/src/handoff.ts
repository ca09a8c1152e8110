import { type ChildProcess, spawn } from 'node:child_process';
import { createServer, type Server, Socket } from 'node:net';

/**
 * Connections handed over: a bottle's bridge passes each TCP connection its
 * agent opened (to `127.0.0.1:3128`) to the gate, which then serves it itself.
 * One process stands between the agent and the network instead of two (the
 * bridge no longer copies every byte), and the agent still holds no way out of
 * its network namespace: what it is handed back is only its own connection.
 *
 * Node cannot take a descriptor from a socket it accepted, so each handoff
 * connection is read by `bb-fdpass recv` (a small C program), which passes on
 * only connected TCP sockets, one at a time, on its Node IPC channel. What the
 * agent sends on the handoff socket is its own to choose; nothing of it reaches
 * this process but such sockets.
 */
export interface HandoffOptions {
  /** The `bb-fdpass` program. */
  helper: string;
  /** Serve a connection handed over (`EgressProxy.accept`). */
  accept(client: Socket): void;
  /** Handoff connections open at once; more are closed as they come. @default 8 */
  maxChannels?: number;
  /** Said when a helper cannot run or fails (not for a bottle that simply ends). */
  onMessage?: (message: string) => void;
}

export interface Handoff {
  /** Listen on it (beside the proxy's own socket, `<socket>.handoff`). */
  server: Server;
  close(): Promise<void>;
}

/** Where a proxy on `socket` takes connections handed over. */
export const handoffPath = (socket: string) => `${socket}.handoff`;

export function createHandoff(options: HandoffOptions): Handoff {
  const max = options.maxChannels ?? 8;
  const helpers = new Set<ChildProcess>();
  const say = options.onMessage ?? (() => {});
  // Node never reads the handoff connection itself: a read would drop the
  // descriptors on it. The helper gets it as its stdin.
  const server = createServer({ pauseOnConnect: true }, (conn) => {
    if (helpers.size >= max) {
      conn.destroy();
      return;
    }
    let helper: ChildProcess;
    try {
      helper = spawn(options.helper, ['recv'], {
        stdio: [conn, 'ignore', 'pipe', 'ipc'],
        env: {},
        serialization: 'json',
      });
    } catch (err) {
      say(`cannot start ${options.helper}: ${(err as Error).message}`);
      conn.destroy();
      return;
    }
    conn.destroy();
    helpers.add(helper);
    let errors = '';
    helper.stderr?.on('data', (d: Buffer) => {
      if (errors.length < 2048) errors += d.toString('utf8');
    });
    helper.on('message', (_message: unknown, handle: unknown) => {
      // The helper passes connected TCP sockets only; anything else is dropped here too.
      if (!(handle instanceof Socket)) return;
      if (typeof handle.remoteAddress !== 'string') {
        handle.destroy();
        return;
      }
      options.accept(handle);
    });
    helper.on('error', (err) => {
      helpers.delete(helper);
      say(`cannot start ${options.helper}: ${err.message}`);
    });
    helper.on('exit', (code) => {
      helpers.delete(helper);
      // 0: the bridge went; 2: it broke the protocol (the agent's own doing).
      if (code !== 0 && code !== 2 && code !== null)
        say(`${options.helper} ended with ${code}${errors ? `: ${errors.trim()}` : ''}`);
    });
  });
  return {
    server,
    close: () =>
      new Promise<void>((resolve) => {
        for (const h of helpers) h.kill('SIGKILL');
        server.close(() => resolve());
      }),
  };
}
