import { createHash } from 'node:crypto';
import {
  closeSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  writeSync,
} from 'node:fs';
import { dirname } from 'node:path';
import { BbError, isBbError, redactString } from '@bb/errors';

/**
 * `started`: a forge write about to be attempted (written, and flushed, before
 * the request: no line, no request). `ok`, `rejected` (refused before any
 * request), `error` (the forge said no), `unknown` (no answer: it may or may
 * not have happened).
 */
export type OpOutcome = 'started' | 'ok' | 'rejected' | 'error' | 'unknown';

/** One line of the op log. */
export interface OpLogEntry {
  seq: number;
  time: string;
  method: string;
  /** What the call aimed at: `#17`, `branch bb/implementer-17`, ... */
  target: string;
  outcome: OpOutcome;
  /** Why it was rejected or failed (absent when ok). */
  reason?: string;
  /** For the outcome of a write: the `seq` of its `started` line. */
  attempt?: number;
  /** A short sentence for a person: "posted comment to #17". */
  summary: string;
  /** sha256 of the previous line as written (64 zeros for the first line). */
  prev: string;
}

export const GENESIS = '0'.repeat(64);
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * The sidecar's semantic op log: JSON Lines, one line per call, each naming the
 * hash of the line before it, so an edited, removed or reordered line breaks
 * the chain. Writes are synchronous and in call order. Text is redacted of
 * registered secrets before it is written.
 */
export interface OpLogOptions {
  /**
   * The log never grows past this many bytes: an append that would is refused
   * (`AUDIT_UNAVAILABLE`), and with it the call it would have logged.
   * @default 64 MiB
   */
  maxBytes?: number;
}

export class OpLog {
  readonly path: string;
  readonly #max: number;
  #prev: string;
  #seq: number;
  #fd: number | undefined;
  #size = 0;

  constructor(path: string, options: OpLogOptions = {}) {
    this.path = path;
    this.#max = options.maxBytes ?? 64 * 1024 * 1024;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    // Continue an existing chain (a sidecar restarted for a resumed bottle).
    const existing = readLines(path);
    const last = existing.at(-1);
    this.#prev = last === undefined ? GENESIS : sha256(last);
    this.#seq = existing.length;
  }

  /**
   * Append a line. With `sync`, it is on disk when this returns. Throws
   * `AUDIT_UNAVAILABLE` when the line cannot be written (a full disk, an
   * unwritable file, the size limit); the log is then left as it was, so the
   * chain stays whole.
   */
  append(
    entry: Omit<OpLogEntry, 'seq' | 'time' | 'prev'> & { time?: string },
    options: {
      sync?: boolean;
      /** Bytes that must still fit after this line (room for a write's outcome line). */
      reserve?: number;
    } = {},
  ): OpLogEntry {
    // Every field the agent can influence is bounded, so a line's size is too.
    const full: OpLogEntry = {
      seq: this.#seq + 1,
      time: entry.time ?? new Date().toISOString(),
      method: clip(entry.method, 64),
      target: clip(redactString(entry.target), 200),
      outcome: entry.outcome,
      ...(entry.reason === undefined ? {} : { reason: clip(redactString(entry.reason), 1000) }),
      summary: clip(redactString(entry.summary), 500),
      ...(entry.attempt === undefined ? {} : { attempt: entry.attempt }),
      prev: this.#prev,
    };
    let line = JSON.stringify(full);
    // Escaping can make a character six bytes: clip again by bytes until the line fits.
    for (
      let cut = 250;
      Buffer.byteLength(line) > MAX_LINE_BYTES && cut >= 16;
      cut = Math.floor(cut / 2)
    ) {
      full.summary = clip(full.summary, cut);
      if (full.reason !== undefined) full.reason = clip(full.reason, cut);
      full.target = clip(full.target, cut);
      line = JSON.stringify(full);
    }
    const bytes = Buffer.from(`${line}\n`);
    try {
      if (this.#fd === undefined) {
        this.#fd = openSync(this.path, 'a', 0o600);
        this.#size = fstatSync(this.#fd).size;
      }
      if (this.#size + bytes.length + (options.reserve ?? 0) > this.#max)
        throw new BbError(
          'AUDIT_UNAVAILABLE',
          `the op log reached its limit of ${this.#max} bytes; no more calls can be logged in this bottle`,
        );
      try {
        let off = 0;
        while (off < bytes.length) off += writeSync(this.#fd, bytes, off, bytes.length - off);
        if (options.sync) fsyncSync(this.#fd);
      } catch (err) {
        // A torn line would break the chain for good: take it back.
        try {
          ftruncateSync(this.#fd, this.#size);
        } catch {
          // nothing more to do; verification will show the damage
        }
        throw err;
      }
    } catch (err) {
      if (isBbError(err)) throw err;
      throw new BbError(
        'AUDIT_UNAVAILABLE',
        `the op log ${this.path} cannot be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); nothing was done`,
        { cause: err },
      );
    }
    this.#size += bytes.length;
    this.#seq = full.seq;
    this.#prev = sha256(line);
    return full;
  }

  /** The hash of the last line and its sequence number: the anchor to keep elsewhere. */
  get head(): { hash: string; seq: number } {
    return { hash: this.#prev, seq: this.#seq };
  }

  /** Flush the log to disk and close it (on shutdown). Appending again reopens it. */
  sync(): void {
    if (this.#fd === undefined) return;
    fsyncSync(this.#fd);
    closeSync(this.#fd);
    this.#fd = undefined;
  }
}

/** The longest an op-log line can be (its fields are clipped): room to reserve for one. */
export const MAX_LINE_BYTES = 4096;

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function readLines(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').filter((l) => l.length > 0);
}

export interface OpLogVerification {
  ok: boolean;
  entries: OpLogEntry[];
  /** Each problem with the 1-based line it was found on. */
  problems: Array<{ line: number; problem: string }>;
}

/**
 * Check an op log's hash chain; reports exactly which lines are wrong and how.
 * A chain alone cannot protect its last line (nothing names its hash): pass the
 * `head` the sidecar relayed (`OpLog.head`) to check the end of the log too.
 */
export function verifyOpLog(
  text: string,
  head?: { hash: string; seq: number },
  /** Heads recorded for earlier turns: the log must still run through each of them. */
  earlier: ReadonlyArray<{ hash: string; seq: number }> = [],
): OpLogVerification {
  const problems: OpLogVerification['problems'] = [];
  const entries: OpLogEntry[] = [];
  let prev = GENESIS;
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  else if (lines.length > 0)
    problems.push({
      line: lines.length,
      problem: 'the last line is not terminated (torn write or truncation)',
    });
  const hashes: string[] = [];
  lines.forEach((line, i) => {
    let entry: OpLogEntry | undefined;
    try {
      entry = JSON.parse(line) as OpLogEntry;
    } catch {
      problems.push({ line: i + 1, problem: 'not valid JSON' });
    }
    if (entry) {
      if (entry.prev !== prev)
        problems.push({
          line: i + 1,
          problem: 'hash chain broken: the line before it was changed, removed or reordered',
        });
      if (entry.seq !== i + 1)
        problems.push({
          line: i + 1,
          problem: `sequence number ${entry.seq} where ${i + 1} was expected`,
        });
      entries.push(entry);
    }
    prev = sha256(line);
    hashes.push(prev);
  });
  for (const a of earlier) {
    if (a.seq === 0) continue;
    if (hashes.length < a.seq)
      problems.push({
        line: hashes.length,
        problem: `an earlier turn's record ends the log at line ${a.seq}, but it has only ${hashes.length} lines: lines were removed`,
      });
    else if (hashes[a.seq - 1] !== a.hash)
      problems.push({
        line: a.seq,
        problem: `line ${a.seq} no longer matches the head an earlier turn's record verified: it (or a line before it) was changed`,
      });
  }
  if (head) {
    if (lines.length < head.seq)
      problems.push({
        line: lines.length,
        problem: `the log ends at line ${lines.length} but the recorded head is line ${head.seq}: lines were removed`,
      });
    else if (lines.length > head.seq)
      problems.push({
        line: head.seq + 1,
        problem: `lines after the recorded head (line ${head.seq}) were added`,
      });
    else if (prev !== head.hash)
      problems.push({
        line: lines.length,
        problem: 'the last line does not match the recorded head hash: it was changed',
      });
  }
  return { ok: problems.length === 0, entries, problems };
}

/** Read and verify an op log file. */
export function verifyOpLogFile(
  path: string,
  head?: { hash: string; seq: number },
  earlier: ReadonlyArray<{ hash: string; seq: number }> = [],
): OpLogVerification {
  return verifyOpLog(readFileSync(path, 'utf8'), head, earlier);
}
