// What an egress proxy that decides requests on their heads must hold against a
// hostile client: every request on a kept connection is decided, a body is never
// read as a request, ambiguous framing never reaches the server, and nothing
// hop-by-hop crosses. Run against ours (egress-framing.test.ts) and against a
// proxy that decides the first request and then splices blindly
// (fixtures/naive-splice.fixture.ts), which must fail every test.
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';

/** A proxy under test, listening on `socket`, allowing `allow` (host:port entries). */
export type StartProxy = (socket: string, allow: string[]) => Promise<{ close(): Promise<void> }>;

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/** Send raw bytes and collect the reply until the proxy closes or `ms` pass. */
export function rawExchange(socket: string, text: string, ms = 1500): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(socket);
    let out = '';
    const timer = setTimeout(() => {
      s.destroy();
      resolve(out);
    }, ms);
    s.on('data', (d) => (out += d.toString('latin1')));
    s.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
    s.on('error', () => resolve(out));
    s.write(text, 'latin1');
  });
}

export function describeFramingSuite(name: string, start: StartProxy): void {
  describe(`${name}: request framing against a hostile client`, () => {
    const dir = mkdtempSync(join(tmpdir(), 'bb-framing-'));
    const socket = join(dir, 'egress.sock');
    const seen: Seen[] = [];
    let server: Server;
    let port: number;
    let proxy: { close(): Promise<void> };
    const allowed = () => `127.0.0.1:${port}`;

    beforeAll(async () => {
      server = createServer((req, res) => {
        let body = '';
        req.setEncoding('latin1');
        req.on('data', (c: string) => (body += c));
        req.on('end', () => {
          seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
          res.writeHead(200, { 'content-type': 'text/plain' }).end(`seen ${req.url}`);
        });
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      port = (server.address() as AddressInfo).port;
      proxy = await start(socket, [allowed()]);
    });
    beforeEach(() => {
      seen.length = 0;
    });
    afterAll(async () => {
      await proxy.close();
      server.closeAllConnections();
      server.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const get = (target: string, extra = '') =>
      `GET ${target} HTTP/1.1\r\nHost: ${new URL(target).host}\r\n${extra}\r\n`;

    it('decides every request on a kept connection, not only the first', async () => {
      const out = await rawExchange(
        socket,
        get(`http://${allowed()}/first`) + get('http://127.0.0.2:9/second'),
      );
      expect(out).toMatch(/^HTTP\/1.1 200[\s\S]*seen \/first/);
      expect(out).toMatch(/HTTP\/1.1 403[\s\S]*"error":"egress_denied"/);
      expect(seen.map((s) => s.url)).toEqual(['/first']);
    });

    it('carries a body as a body, whatever it holds, and decides the request after it', async () => {
      const inner = get(`http://${allowed()}/hidden`);
      const chunked = `${inner.length.toString(16)}\r\n${inner}\r\n0\r\n\r\n`;
      const out = await rawExchange(
        socket,
        `POST http://${allowed()}/upload HTTP/1.1\r\nHost: ${allowed()}\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}` +
          `POST http://${allowed()}/sized HTTP/1.1\r\nHost: ${allowed()}\r\nContent-Length: ${inner.length}\r\n\r\n${inner}` +
          get('http://127.0.0.2:9/after'),
      );
      expect(seen.map((s) => [s.url, s.body])).toEqual([
        ['/upload', inner],
        ['/sized', inner],
      ]);
      expect(out).toMatch(/HTTP\/1.1 403/);
    });

    it('refuses ambiguous framing before anything reaches the server', async () => {
      const head = `POST http://${allowed()}/x HTTP/1.1\r\nHost: ${allowed()}\r\n`;
      const smuggled = get(`http://${allowed()}/smuggled`);
      const attempts = [
        // CL.TE and TE.CL
        `${head}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        `${head}Transfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n0\r\n\r\n${smuggled}`,
        // two lengths, a length that is not a number
        `${head}Content-Length: 0\r\nContent-Length: 5\r\n\r\nhello${smuggled}`,
        `${head}Content-Length: +5\r\n\r\nhello${smuggled}`,
        // transfer codings the server may read otherwise
        `${head}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        `${head}Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n${smuggled}`,
        `${head}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        // a folded line, a bare LF, a NUL
        `${head}X-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        `${head}X-A: 1\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        `${head}X-A: 1\0\r\n\r\n${smuggled}`,
        // a quoted chunk extension, a bare LF after a size, trailers
        `${head}Transfer-Encoding: chunked\r\n\r\n1;a="\r\n"\r\nx\r\n0\r\n\r\n${smuggled}`,
        `${head}Transfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n${smuggled}`,
        `${head}Transfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 5\r\n\r\n${smuggled}`,
        // HTTP/1.0 with chunking, a Connection header that drops the length
        `POST http://${allowed()}/x HTTP/1.0\r\nHost: ${allowed()}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`,
        `${head}Connection: content-length\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`,
      ];
      for (const attempt of attempts) {
        const out = await rawExchange(socket, attempt, 800);
        expect(out, JSON.stringify(attempt)).toMatch(/^HTTP\/1.1 (400|501)/);
      }
      expect(seen.filter((s) => s.url === '/smuggled')).toEqual([]);
      // The chunked attempts whose body was refused never reached the server at all.
      expect(seen.filter((s) => s.body !== '' || s.url !== '/x')).toEqual([]);
    });

    it('passes nothing hop-by-hop and no proxy credentials to the server', async () => {
      const out = await rawExchange(
        socket,
        get(
          `http://${allowed()}/clean`,
          'Proxy-Authorization: Basic c2VjcmV0\r\nConnection: close, X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=99\r\nUpgrade: websocket\r\nTE: trailers\r\nX-Kept: yes\r\n',
        ),
      );
      expect(out).toMatch(/^HTTP\/1.1 200/);
      const h = seen[0]!.headers;
      expect(h['x-kept']).toBe('yes');
      for (const gone of ['proxy-authorization', 'x-private', 'keep-alive', 'upgrade', 'te'])
        expect(h[gone], gone).toBeUndefined();
      expect(h['connection']).toBe('close');
    });
  });
}
