import { randomUUID } from 'node:crypto';
import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';

export type QueueEventType = 'checkin' | 'op' | 'done';

export interface DoneSignal {
  status: 'success' | 'failure' | 'blocked';
  summary: string;
}

/** One event the sidecar relays to the orchestrator. */
export interface QueueEvent {
  id: string;
  type: QueueEventType;
  time: string;
  slug?: string | undefined;
  /** `op`: the op-log entry; `done`: the done signal; `checkin`: the method called. */
  data: Record<string, unknown>;
}

const SUFFIX = '.json';
const TMP = '.tmp';

/**
 * Writes events into a queue directory: each as its own file, written to a
 * temporary name, flushed, then renamed into place, so a reader never sees half
 * an event. File names sort in write order.
 */
export class QueueWriter {
  readonly dir: string;
  readonly #slug: string | undefined;
  #seq = 0;

  constructor(dir: string, slug?: string) {
    this.dir = dir;
    this.#slug = slug;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /**
   * Write one event. Ops and done signals are flushed to disk; a check-in only
   * when `sync` asks. Throws `AUDIT_UNAVAILABLE` when the event cannot be written.
   */
  write(
    type: QueueEventType,
    data: Record<string, unknown>,
    options: { sync?: boolean } = {},
  ): QueueEvent {
    const event: QueueEvent = {
      id: randomUUID(),
      type,
      time: new Date().toISOString(),
      slug: this.#slug,
      data,
    };
    const name = `${String(Date.now()).padStart(15, '0')}-${String(++this.#seq).padStart(9, '0')}-${event.id}`;
    const tmp = join(this.dir, `.${name}${TMP}`);
    try {
      const fd = openSync(tmp, 'wx', 0o600);
      try {
        writeSync(fd, JSON.stringify(event));
        // A check-in only says "still alive": losing the newest one to a power cut
        // is harmless, so it skips the flush unless asked. Ops and done signals are flushed.
        if (type !== 'checkin' || options.sync) fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, join(this.dir, `${name}${SUFFIX}`));
    } catch (err) {
      try {
        unlinkSync(tmp);
      } catch {
        // never made
      }
      throw new BbError(
        'AUDIT_UNAVAILABLE',
        `the event queue ${this.dir} cannot be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`,
        { cause: err },
      );
    }
    return event;
  }
}

/**
 * Check-ins say only "alive at this time" (plus the op log's head), and the
 * watchdog counts in minutes, so a burst of calls becomes at most one check-in
 * file per interval: the first at once, the latest at the end of the interval.
 * Nothing is lost but redundant intermediate check-ins.
 */
export class CheckinThrottle {
  readonly #writer: QueueWriter;
  readonly #intervalMs: number;
  #last = 0;
  #pending: Record<string, unknown> | undefined;
  #timer: NodeJS.Timeout | undefined;

  constructor(writer: QueueWriter, intervalMs = 1000) {
    this.#writer = writer;
    this.#intervalMs = intervalMs;
  }

  checkin(data: Record<string, unknown>): void {
    const now = Date.now();
    if (now - this.#last >= this.#intervalMs && !this.#timer) {
      this.#last = now;
      this.#tryWrite(data);
      return;
    }
    this.#pending = data;
    this.#timer ??= setTimeout(
      () => this.flush(),
      Math.max(0, this.#intervalMs - (now - this.#last)),
    ).unref();
  }

  /**
   * Write this check-in now and flushed, whatever the interval (before a forge
   * write: the orchestrator then holds the op log's head before the request,
   * and a queue that cannot be written stops the write). Throws `AUDIT_UNAVAILABLE`.
   */
  now(data: Record<string, unknown>): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#pending = undefined;
    this.#last = Date.now();
    this.#writer.write('checkin', data, { sync: true });
  }

  /** Write the latest pending check-in now (e.g. on shutdown). */
  flush(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending) {
      this.#last = Date.now();
      this.#tryWrite(this.#pending);
      this.#pending = undefined;
    }
  }

  // A lost "still alive" is harmless (the next one says it); forge writes check
  // the queue themselves through `now`.
  #tryWrite(data: Record<string, unknown>): void {
    try {
      this.#writer.write('checkin', data);
    } catch {
      // the queue is full or gone; `now` reports it before any write
    }
  }
}

export interface QueueReaderOptions {
  /** Temporary files older than this are a crashed writer's leftovers and are removed. @default 60000 */
  staleTmpMs?: number;
  /** Called for a file that is complete but unreadable; it is moved to `bad/`. */
  onBadFile?: (file: string, reason: string) => void;
}

/**
 * Consumes a queue directory in order, at least once: an event's file is
 * removed only after the handler finished with it, so a crash re-delivers it.
 * Events are also remembered by id, so a re-delivered event reaches the handler
 * of this reader once. Handlers should still be idempotent across restarts.
 */
export class QueueReader {
  readonly dir: string;
  readonly #options: QueueReaderOptions;
  readonly #seen = new Set<string>();

  constructor(dir: string, options: QueueReaderOptions = {}) {
    this.dir = dir;
    this.#options = options;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** Handle every complete event now in the queue, oldest first. Returns how many were handled. */
  async drain(handler: (event: QueueEvent) => Promise<void> | void): Promise<number> {
    let names: string[];
    try {
      names = readdirSync(this.dir);
    } catch {
      return 0;
    }
    this.#sweepTmp(names);
    let handled = 0;
    for (const name of names.filter((n) => n.endsWith(SUFFIX) && !n.startsWith('.')).sort()) {
      const file = join(this.dir, name);
      let event: QueueEvent;
      try {
        event = JSON.parse(readFileSync(file, 'utf8')) as QueueEvent;
        if (typeof event?.id !== 'string' || typeof event.type !== 'string')
          throw new Error('not a queue event');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        this.#quarantine(name, (err as Error).message);
        continue;
      }
      if (!this.#seen.has(event.id)) {
        await handler(event);
        this.#seen.add(event.id);
        handled++;
      }
      try {
        unlinkSync(file);
      } catch {
        // already gone: another reader took it
      }
    }
    return handled;
  }

  #sweepTmp(names: string[]): void {
    const stale = this.#options.staleTmpMs ?? 60_000;
    for (const n of names) {
      if (!n.endsWith(TMP)) continue;
      const file = join(this.dir, n);
      try {
        if (Date.now() - statSync(file).mtimeMs > stale) unlinkSync(file);
      } catch {
        // gone meanwhile
      }
    }
  }

  #quarantine(name: string, reason: string): void {
    const bad = join(this.dir, 'bad');
    try {
      mkdirSync(bad, { recursive: true, mode: 0o700 });
      renameSync(join(this.dir, name), join(bad, name));
    } catch {
      // leave it; it will be reported again
    }
    this.#options.onBadFile?.(name, reason);
  }
}
