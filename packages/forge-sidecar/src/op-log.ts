import { createHash } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { redactString } from '@bb/errors';

export type OpOutcome = 'ok' | 'rejected' | 'error';

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
export class OpLog {
  readonly path: string;
  #prev: string;
  #seq: number;
  #fd: number | undefined;

  constructor(path: string) {
    this.path = path;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    // Continue an existing chain (a sidecar restarted for a resumed bottle).
    const existing = readLines(path);
    const last = existing.at(-1);
    this.#prev = last === undefined ? GENESIS : sha256(last);
    this.#seq = existing.length;
  }

  append(entry: Omit<OpLogEntry, 'seq' | 'time' | 'prev'> & { time?: string }): OpLogEntry {
    const full: OpLogEntry = {
      seq: ++this.#seq,
      time: entry.time ?? new Date().toISOString(),
      method: entry.method,
      target: redactString(entry.target),
      outcome: entry.outcome,
      ...(entry.reason === undefined ? {} : { reason: redactString(entry.reason) }),
      summary: redactString(entry.summary),
      prev: this.#prev,
    };
    const line = JSON.stringify(full);
    this.#fd ??= openSync(this.path, 'a', 0o600);
    writeSync(this.#fd, `${line}\n`);
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
export function verifyOpLog(text: string, head?: { hash: string; seq: number }): OpLogVerification {
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
  });
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
): OpLogVerification {
  return verifyOpLog(readFileSync(path, 'utf8'), head);
}
