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
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', close);
      upstream.on('error', close);
      client.on('close', close);
      upstream.on('close', close);
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
