import { createServer } from 'node:net';

/** A TCP port on 127.0.0.1 that was free a moment ago (for a test or bench to listen on). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}
