import { createServer } from 'node:http';

/** An upstream on loopback that keeps the `x-key` header of each request it gets. */
export async function http(): Promise<{ url: string; keys: string[]; close(): Promise<void> }> {
  const keys: string[] = [];
  const server = createServer((req, res) => {
    keys.push(String(req.headers['x-key'] ?? ''));
    res.end('ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    keys,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** Run `fn` with an upstream from {@link http}, closed afterwards whatever happens. */
export async function withUpstream(
  fn: (up: Awaited<ReturnType<typeof http>>) => Promise<void>,
): Promise<void> {
  const up = await http();
  try {
    await fn(up);
  } finally {
    await up.close();
  }
}
