/**
 * The little of HTTP/1.1 the egress proxy reads itself (RFC 9112): a request's
 * head, where its body ends, and where a response ends. The proxy decides each
 * request on its head and then carries the body's bytes unchanged, so it must
 * see request boundaries exactly as the server behind it will: anything
 * ambiguous (two lengths, an unknown transfer coding, a folded or bare-LF line,
 * a quoted chunk extension, trailers) is refused, never guessed at.
 */

/** A request the proxy will not forward, and the status that says why. */
export class FramingError extends Error {
  constructor(
    readonly status: 400 | 501 | 505,
    message: string,
  ) {
    super(message);
  }
}

export interface RequestHead {
  method: string;
  target: string;
  /** `1.0` or `1.1`. */
  minor: 0 | 1;
  /** In order, names as sent; values without surrounding whitespace. */
  headers: Array<[name: string, value: string]>;
  /** The names in lower case, in the same order. */
  names: string[];
}

export type BodyFraming =
  | { kind: 'none' }
  | { kind: 'length'; bytes: number }
  | { kind: 'chunked' };

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const REQUEST_LINE = /^([A-Z]+) ([\x21-\x7e]+) HTTP\/1\.([01])$/;
// A field value: no control character but HTAB (obs-text passes as latin1).
const FIELD = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([^\0-\x08\x0a-\x1f\x7f]*?)[ \t]*$/;

/** Parse a request head (latin1, without its closing empty line). */
export function parseRequestHead(text: string): RequestHead {
  const lines = text.split('\r\n');
  const m = REQUEST_LINE.exec(lines[0]!);
  if (!m) {
    if (/^[A-Z]+ \S+ HTTP\/\d/.test(lines[0]!))
      throw new FramingError(505, 'only HTTP/1.0 and HTTP/1.1 are forwarded');
    throw new FramingError(400, 'the request line is not METHOD TARGET HTTP/1.x');
  }
  const headers: Array<[string, string]> = [];
  const names: string[] = [];
  for (let i = 1; i < lines.length; i++) {
    const f = FIELD.exec(lines[i]!);
    if (!f)
      throw new FramingError(
        400,
        `header line ${i} is malformed (folded lines, bare CR/LF and control characters are refused)`,
      );
    headers.push([f[1]!, f[2]!]);
    names.push(f[1]!.toLowerCase());
  }
  return { method: m[1]!, target: m[2]!, minor: m[3] === '1' ? 1 : 0, headers, names };
}

/** The values of every header named `name` (lower case). */
export function headerValues(head: RequestHead, name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < head.names.length; i++)
    if (head.names[i] === name) out.push(head.headers[i]![1]);
  return out;
}

/** Comma-separated tokens of a list header, lower case. */
export function listTokens(values: readonly string[]): string[] {
  const out: string[] = [];
  for (const v of values)
    for (const t of v.split(',')) {
      const s = t.trim().toLowerCase();
      if (s) out.push(s);
    }
  return out;
}

/**
 * Where a request's body ends. One Content-Length of digits, or a single
 * `Transfer-Encoding: chunked` (HTTP/1.1 only); both, several, or anything
 * else is refused.
 */
export function requestFraming(head: RequestHead): BodyFraming {
  const te = headerValues(head, 'transfer-encoding');
  const cl = headerValues(head, 'content-length');
  if (te.length > 0) {
    if (cl.length > 0)
      throw new FramingError(
        400,
        'a request may not carry both Content-Length and Transfer-Encoding',
      );
    if (head.minor === 0)
      throw new FramingError(400, 'HTTP/1.0 requests cannot use Transfer-Encoding');
    if (te.length !== 1 || te[0]!.toLowerCase() !== 'chunked')
      throw new FramingError(501, 'the only transfer coding forwarded is a single "chunked"');
    return { kind: 'chunked' };
  }
  if (cl.length > 1) throw new FramingError(400, 'a request may carry one Content-Length only');
  if (cl.length === 1) {
    if (!/^\d{1,15}$/.test(cl[0]!))
      throw new FramingError(
        400,
        `Content-Length ${JSON.stringify(cl[0]!.slice(0, 40))} is not a number`,
      );
    const bytes = Number(cl[0]);
    return bytes === 0 ? { kind: 'none' } : { kind: 'length', bytes };
  }
  return { kind: 'none' };
}

const CHUNK_SIZE_LINE = new RegExp(
  `^([0-9A-Fa-f]{1,13})((?:;${TOKEN.source.slice(1, -1)}(?:=${TOKEN.source.slice(1, -1)})?)*)$`,
);
const LINE_MAX = 1024;
const CR = 13;
const LF = 10;

/**
 * Finds the end of a chunked body, byte by byte through size lines and by
 * skipping through chunk data. `push` returns how many bytes of `chunk` belong
 * to the body (all of them until the end is found) or throws a FramingError.
 * Strict for requests; a response meter uses it too and stops counting on error.
 */
export class ChunkedScanner {
  private line = '';
  /** Data bytes left in the current chunk; then its CRLF. */
  private data = 0;
  private state: 'size' | 'data' | 'data-cr' | 'data-lf' | 'last' | 'done' = 'size';

  get done(): boolean {
    return this.state === 'done';
  }

  push(chunk: Buffer): number {
    let i = 0;
    while (i < chunk.length && this.state !== 'done') {
      if (this.state === 'data') {
        const take = Math.min(this.data, chunk.length - i);
        i += take;
        this.data -= take;
        if (this.data === 0) this.state = 'data-cr';
        continue;
      }
      const b = chunk[i++]!;
      if (this.state === 'data-cr') {
        if (b !== CR) throw new FramingError(400, 'a chunk must end with CRLF');
        this.state = 'data-lf';
      } else if (this.state === 'data-lf') {
        if (b !== LF) throw new FramingError(400, 'a chunk must end with CRLF');
        this.state = 'size';
      } else if (b === LF) {
        if (!this.line.endsWith('\r')) throw new FramingError(400, 'a bare LF in a chunked body');
        const line = this.line.slice(0, -1);
        this.line = '';
        if (this.state === 'last') {
          if (line !== '') throw new FramingError(400, 'trailers are not forwarded');
          this.state = 'done';
          continue;
        }
        const m = CHUNK_SIZE_LINE.exec(line);
        if (!m) throw new FramingError(400, 'a malformed chunk size line');
        this.data = Number.parseInt(m[1]!, 16);
        this.state = this.data === 0 ? 'last' : 'data';
      } else {
        if (this.line.endsWith('\r')) throw new FramingError(400, 'a bare CR in a chunked body');
        if (this.line.length >= LINE_MAX)
          throw new FramingError(400, 'a chunk size line is too long');
        this.line += String.fromCharCode(b);
      }
    }
    return i;
  }
}

/** What the proxy needs of a response's head to find its end (for the log only). */
export interface ResponseHead {
  status: number;
  framing: BodyFraming | { kind: 'close' };
}

/**
 * Read a response head leniently: it is only counted, never trusted for a
 * decision. Undefined when it is not an HTTP/1.x response at all.
 */
export function parseResponseHead(text: string, method: string): ResponseHead | undefined {
  if (!text.startsWith('HTTP/1.') || text[8] !== ' ') return undefined;
  const status = Number(text.slice(9, 12));
  if (!Number.isInteger(status) || status < 100) return undefined;
  if (method === 'HEAD' || status === 204 || status === 304 || status < 200)
    return { status, framing: { kind: 'none' } };
  const lower = text.toLowerCase();
  const te = fieldValue(lower, 'transfer-encoding');
  if (te !== undefined)
    return { status, framing: te.endsWith('chunked') ? { kind: 'chunked' } : { kind: 'close' } };
  const cl = fieldValue(lower, 'content-length');
  if (cl === undefined || !/^\d{1,15}$/.test(cl)) return { status, framing: { kind: 'close' } };
  const bytes = Number(cl);
  return { status, framing: bytes === 0 ? { kind: 'none' } : { kind: 'length', bytes } };
}

/** The first value of a field in a lower-cased head, trimmed. */
function fieldValue(lower: string, name: string): string | undefined {
  const at = lower.indexOf(`\r\n${name}:`);
  if (at < 0) return undefined;
  const from = at + name.length + 3;
  const to = lower.indexOf('\r\n', from);
  return lower.slice(from, to < 0 ? undefined : to).trim();
}
