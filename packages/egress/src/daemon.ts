import { errorMessage, isBbError } from '@bb/errors';

/** Keep `server` up: SIGHUP reloads it; SIGTERM or SIGINT closes it, then the process exits 0. */
export function serveUntilStopped(server: { reload(): unknown; close(): Promise<unknown> }): void {
  process.on('SIGHUP', () => server.reload());
  const stop = () => void server.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

/** A daemon that could not start: `name: why` on stderr, exit 2 for bad input, 1 otherwise. */
export function failedToStart(name: string, err: unknown): never {
  process.stderr.write(`${name}: ${errorMessage(err)}\n`);
  process.exit(isBbError(err, 'INVALID_INPUT') ? 2 : 1);
}
