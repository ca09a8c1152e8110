import { connect, createServer, type Server } from 'node:net';

/**
 * Inside a bottle (which has no network), expose Unix sockets as TCP ports on
 * 127.0.0.1 for tools that only speak TCP: e.g. `3128=/run/bb/egress.sock`
 * (HTTPS_PROXY) and `3129=/run/bb/cred.sock` (the model API base URL).
 */
export async function startBridge(
  mappings: Array<{ port: number; socket: string }>,
): Promise<Server[]> {
  const servers: Server[] = [];
  for (const m of mappings) {
    const server = createServer((client) => {
      const upstream = connect(m.socket);
      client.pipe(upstream);
      upstream.pipe(client);
      // The pipes carry each side's end to the other once all its bytes are written: a side
      // that closes is never allowed to cut what is still on its way to the other.
      const abort = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', abort);
      upstream.on('error', abort);
      // A client gone can receive nothing more; an upstream gone still has bytes to deliver.
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.end());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(m.port, '127.0.0.1', () => resolve());
    });
    servers.push(server);
  }
  return servers;
}

/** Parse `PORT=SOCKET` arguments. */
export function parseBridgeArgs(args: string[]): Array<{ port: number; socket: string }> {
  return args.map((a) => {
    const m = /^(\d{1,5})=(\/.+)$/.exec(a);
    if (!m || Number(m[1]) < 1 || Number(m[1]) > 65535)
      throw new Error(`bridge mapping ${JSON.stringify(a)} must be PORT=/path/to.sock`);
    return { port: Number(m[1]), socket: m[2]! };
  });
}
