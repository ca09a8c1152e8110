// Proves the daemon path CI depends on: a container from the offline base image,
// with no network at all, reaches a host process over a Unix socket in a
// bind-mounted directory. Fails (never skips) when BB_REQUIRE_DOCKER=1.
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('real Docker: bottle base image, --network none, Unix socket', () => {
  const client = new Docker();
  let dir: string;
  let server: Server;
  const received: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'bb-smoke-'));
    const sock = join(dir, 'ping.sock');
    server = createServer((conn) => {
      conn.on('data', (d) => {
        received.push(d.toString());
        conn.end('pong\n');
      });
    });
    await new Promise<void>((res) => server.listen(sock, res));
    // The bottle runs as uid 1000: give it the directory and the socket, nobody else.
    if (process.getuid?.() === 0) {
      chownSync(dir, 1000, 1000);
      chownSync(sock, 1000, 1000);
    }
    chmodSync(dir, 0o700);
    chmodSync(sock, 0o600);
  });

  afterAll(async () => {
    server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('talks to the host over the mounted socket and has no network interface but lo', async () => {
    const script = `
      const net = require('node:net');
      const ifs = Object.keys(require('node:os').networkInterfaces());
      const c = net.connect('/run/bb/ping.sock', () => c.write('ping from ' + process.getuid() + ' ifs=' + ifs.join(',')));
      c.on('data', (d) => { process.stdout.write(d); process.exit(d.toString() === 'pong\\n' ? 0 : 3); });
      c.on('error', (e) => { console.error(e.message); process.exit(4); });
    `;
    const container = await client.createContainer({
      Image: BASE_IMAGE,
      Cmd: ['node', '-e', script],
      User: '1000:1000',
      Labels: { 'bb.test': 'docker-smoke' },
      HostConfig: {
        NetworkMode: 'none',
        Binds: [`${dir}:/run/bb`],
        CapDrop: ['ALL'],
        SecurityOpt: ['no-new-privileges'],
        ReadonlyRootfs: true,
        PidsLimit: 64,
        Memory: 128 * 1024 * 1024,
      },
    });
    try {
      await container.start();
      const { StatusCode } = (await container.wait()) as { StatusCode: number };
      expect(StatusCode).toBe(0);
      expect(received).toEqual(['ping from 1000 ifs=lo']);
      const info = await container.inspect();
      expect(info.HostConfig.NetworkMode).toBe('none');
      expect(info.HostConfig.CapDrop).toEqual(['ALL']);
    } finally {
      await container.remove({ force: true });
    }
  });

  it('cannot open a TCP connection anywhere', async () => {
    const script = `
      const s = require('node:net').connect({ host: '1.1.1.1', port: 80, timeout: 2000 });
      s.on('connect', () => process.exit(0));
      s.on('error', (e) => { process.stdout.write(e.code); process.exit(7); });
      s.on('timeout', () => process.exit(8));
    `;
    const container = await client.createContainer({
      Image: BASE_IMAGE,
      Cmd: ['node', '-e', script],
      HostConfig: { NetworkMode: 'none', CapDrop: ['ALL'] },
    });
    try {
      await container.start();
      const { StatusCode } = (await container.wait()) as { StatusCode: number };
      // ENETUNREACH: there is no route, so nothing is sent at all.
      expect(StatusCode).toBe(7);
    } finally {
      await container.remove({ force: true });
    }
  });
});
