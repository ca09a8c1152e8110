import { describe, expect, it } from 'vitest';
import {
  ChunkedScanner,
  FramingError,
  parseRequestHead,
  parseResponseHead,
  requestFraming,
} from '../src/http-framing';

const head = (lines: string[]) => parseRequestHead(lines.join('\r\n'));
const framing = (lines: string[]) => requestFraming(head(lines));
const status = (f: () => unknown) => {
  try {
    f();
  } catch (err) {
    if (err instanceof FramingError) return err.status;
    throw err;
  }
  return 'accepted';
};

describe('request heads', () => {
  it('reads the request line and fields as sent, trimming values', () => {
    const h = head(['GET http://a.test/x?y HTTP/1.1', 'Host: a.test', 'X-Two:  b c \t']);
    expect(h).toMatchObject({ method: 'GET', target: 'http://a.test/x?y', minor: 1 });
    expect(h.headers).toEqual([
      ['Host', 'a.test'],
      ['X-Two', 'b c'],
    ]);
    expect(h.names).toEqual(['host', 'x-two']);
  });

  it('refuses what a server could read another way', () => {
    for (const bad of [
      ['get http://a.test/ HTTP/1.1'],
      ['GET  http://a.test/ HTTP/1.1'],
      ['GET http://a.test/ HTTP/1.1', 'X: 1', ' folded'],
      ['GET http://a.test/ HTTP/1.1', 'X : 1'],
      ['GET http://a.test/ HTTP/1.1', 'X: a\nb'],
      ['GET http://a.test/ HTTP/1.1', 'X: a\rb'],
      ['GET http://a.test/ HTTP/1.1', 'X: a\0'],
      ['GET http://a.test/ HTTP/1.1', ': no name'],
    ])
      expect(
        status(() => head(bad)),
        JSON.stringify(bad),
      ).toBe(400);
    expect(status(() => head(['GET http://a.test/ HTTP/2.0']))).toBe(505);
  });

  it('finds a body by one length or one chunked coding, and nothing else', () => {
    const r = 'POST http://a.test/ HTTP/1.1';
    expect(framing([r])).toEqual({ kind: 'none' });
    expect(framing([r, 'Content-Length: 0'])).toEqual({ kind: 'none' });
    expect(framing([r, 'Content-Length: 12'])).toEqual({ kind: 'length', bytes: 12 });
    expect(framing([r, 'transfer-encoding: Chunked'])).toEqual({ kind: 'chunked' });
    for (const bad of [
      ['Content-Length: 1', 'Transfer-Encoding: chunked'],
      ['Content-Length: 1', 'Content-Length: 1'],
      ['Content-Length: 1,1'],
      ['Content-Length: -1'],
      ['Content-Length: 1234567890123456'],
    ])
      expect(
        status(() => framing([r, ...bad])),
        bad.join('|'),
      ).toBe(400);
    for (const bad of [
      ['Transfer-Encoding: gzip, chunked'],
      ['Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'],
      ['Transfer-Encoding: identity'],
    ])
      expect(
        status(() => framing([r, ...bad])),
        bad.join('|'),
      ).toBe(501);
    expect(
      status(() => framing(['POST http://a.test/ HTTP/1.0', 'Transfer-Encoding: chunked'])),
    ).toBe(400);
  });
});

describe('ChunkedScanner', () => {
  const body = '5;name=v\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n';
  const next = 'GET http://a.test/ HTTP/1.1\r\n\r\n';

  it('finds the exact end of a body however it is split, leaving what follows', () => {
    const bytes = Buffer.from(body + next, 'latin1');
    for (let cut = 0; cut <= bytes.length; cut++) {
      const s = new ChunkedScanner();
      const a = s.push(bytes.subarray(0, cut));
      const b = s.done ? 0 : s.push(bytes.subarray(cut));
      expect(s.done, `cut at ${cut}`).toBe(true);
      expect(a + b, `cut at ${cut}`).toBe(body.length);
    }
  });

  it('refuses size lines and endings a server could read otherwise, and trailers', () => {
    for (const bad of [
      '5\nhello\r\n0\r\n\r\n',
      '5\r\nhelloX\r\n0\r\n\r\n',
      '5\r\nhello\n0\r\n\r\n',
      ' 5\r\nhello\r\n0\r\n\r\n',
      '5 \r\nhello\r\n0\r\n\r\n',
      '0x5\r\nhello\r\n0\r\n\r\n',
      '5;a="x"\r\nhello\r\n0\r\n\r\n',
      '5;a\r\r\nhello\r\n0\r\n\r\n',
      'fffffffffffffff\r\n',
      `1;${'a'.repeat(2000)}\r\n`,
      '0\r\nX-Trailer: 1\r\n\r\n',
    ])
      expect(() => new ChunkedScanner().push(Buffer.from(bad)), JSON.stringify(bad)).toThrow(
        FramingError,
      );
  });
});

describe('response heads (counted only)', () => {
  it('tell the status and where the body ends', () => {
    expect(parseResponseHead('HTTP/1.1 200 OK\r\nContent-Length: 5', 'GET')).toEqual({
      status: 200,
      framing: { kind: 'length', bytes: 5 },
    });
    expect(parseResponseHead('HTTP/1.1 200 OK\r\nContent-Length: 5', 'HEAD')?.framing).toEqual({
      kind: 'none',
    });
    expect(parseResponseHead('HTTP/1.1 204 No Content', 'GET')?.framing.kind).toBe('none');
    expect(
      parseResponseHead('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked', 'GET')?.framing.kind,
    ).toBe('chunked');
    expect(parseResponseHead('HTTP/1.0 200 OK', 'GET')?.framing.kind).toBe('close');
    expect(parseResponseHead('SSH-2.0-OpenSSH', 'GET')).toBeUndefined();
  });
});
