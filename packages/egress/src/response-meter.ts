import { ChunkedScanner, parseResponseHead } from './http-framing';

/** A request sent upstream, waiting for its response to be counted. */
export interface Exchange {
  method: string;
  /** Its response ended (status undefined when none could be read) or the connection did. */
  ended(status: number | undefined, bytesDown: number): void;
}

const HEAD_END = Buffer.from('\r\n\r\n');
const HEAD_MAX = 64 * 1024;

/**
 * Follows the responses coming back on one upstream connection, in order, to
 * tell each request its status and size for the log. It reads only what it
 * needs (status line, length, chunking) and never changes a byte or decides
 * anything: a response it cannot follow (no length, an upgrade, garbage) is
 * counted to its request until the connection ends. Bytes that arrive while
 * no request waits are counted to the next one.
 */
export class ResponseMeter {
  private readonly queue: Exchange[] = [];
  private state: 'head' | 'length' | 'chunked' | 'lost' = 'head';
  private head: Buffer = Buffer.alloc(0);
  private left = 0;
  private scanner: ChunkedScanner | undefined;
  private status: number | undefined;
  private bytes = 0;
  /** Called each time the last waiting request has its answer. */
  onIdle: (() => void) | undefined;

  /** How many requests wait for their answers. */
  get waiting(): number {
    return this.queue.length;
  }

  /** No request is waiting for its answer. */
  get idle(): boolean {
    return this.queue.length === 0;
  }

  expect(exchange: Exchange): void {
    this.queue.push(exchange);
  }

  feed(chunk: Buffer): void {
    let i = 0;
    while (i < chunk.length) {
      if (this.queue.length === 0 || this.state === 'lost') {
        this.bytes += chunk.length - i;
        return;
      }
      if (this.state === 'head') {
        const start = this.head.length;
        this.head = start ? Buffer.concat([this.head, chunk.subarray(i)]) : chunk.subarray(i);
        const end = this.head.indexOf(HEAD_END, Math.max(0, start - 3));
        if (end < 0) {
          this.bytes += chunk.length - i;
          if (this.head.length > HEAD_MAX) this.lose();
          return;
        }
        const used = end + 4 - start;
        this.bytes += used;
        i += used;
        const parsed = parseResponseHead(
          this.head.toString('latin1', 0, end),
          this.queue[0]!.method,
        );
        this.head = Buffer.alloc(0);
        if (!parsed) {
          this.lose();
          continue;
        }
        this.status = parsed.status;
        if (parsed.status >= 100 && parsed.status < 200) {
          // 101 turns the connection into something else; other 1xx come before the answer.
          if (parsed.status === 101) this.lose();
          continue;
        }
        const f = parsed.framing;
        if (f.kind === 'none') this.finish();
        else if (f.kind === 'length') {
          this.state = 'length';
          this.left = f.bytes;
        } else if (f.kind === 'chunked') {
          this.state = 'chunked';
          this.scanner = new ChunkedScanner();
        } else this.lose();
      } else if (this.state === 'length') {
        const take = Math.min(this.left, chunk.length - i);
        this.left -= take;
        this.bytes += take;
        i += take;
        if (this.left === 0) this.finish();
      } else {
        let took: number;
        try {
          took = this.scanner!.push(chunk.subarray(i));
        } catch {
          this.lose();
          continue;
        }
        this.bytes += took;
        i += took;
        if (this.scanner!.done) this.finish();
      }
    }
  }

  /** The connection ended: what is still waiting ends with it (taken off first: nothing waits on a closed connection). */
  end(): void {
    const all = this.queue.splice(0);
    const status = this.status;
    const bytes = this.bytes;
    this.status = undefined;
    this.bytes = 0;
    all[0]?.ended(status, bytes);
    for (const rest of all.slice(1)) rest.ended(undefined, 0);
  }

  private lose(): void {
    this.state = 'lost';
    this.head = Buffer.alloc(0);
  }

  private finish(): void {
    const done = this.queue.shift()!;
    const status = this.status;
    const bytes = this.bytes;
    this.state = 'head';
    this.status = undefined;
    this.bytes = 0;
    this.scanner = undefined;
    done.ended(status, bytes);
    if (this.queue.length === 0) this.onIdle?.();
  }
}
