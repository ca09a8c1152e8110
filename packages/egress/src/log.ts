import { closeSync, fstatSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/** One line of an egress or credential-proxy log. */
export interface EgressLogEntry {
  time: string;
  kind: 'egress' | 'credential';
  host: string;
  port: number;
  decision: 'allowed' | 'denied';
  /** The allowlist entry or credential route that decided, or why it was denied. */
  rule: string;
  method?: string;
  /** Credential proxy: the route prefix and the names of injected headers (never values). */
  route?: string;
  auth?: string[];
  status?: number;
  bytesUp: number;
  bytesDown: number;
  durationMs: number;
}

export type EgressLogger = (entry: EgressLogEntry) => void;

/**
 * A file logger. `full` once it cannot promise room for one more line: each
 * connection still open holds room for its closing line (`reserve()`, released
 * by its `log`), so what was allowed is always logged. The proxies refuse new
 * requests while it is full.
 */
export type FileLogger = EgressLogger & {
  close(): void;
  readonly full: boolean;
  /** Hold room for one line (a connection's closing line); call the result when it is logged. */
  reserve(): () => void;
};

/** Room kept for each line a connection still has to log. */
const LINE_ROOM = 1024;

/**
 * Append entries as JSON lines to a file; `close()` releases it. Past
 * `maxBytes` it writes one last line saying so and nothing more, and reports
 * `full`: the proxies then refuse what they could no longer log.
 */
export function fileLogger(path: string, options: { maxBytes?: number } = {}): FileLogger {
  const max = options.maxBytes ?? 64 * 1024 * 1024;
  mkdirSync(dirname(path), { recursive: true });
  // Opened once in append mode: each entry is one write(2) of a whole line.
  let fd: number | undefined = openSync(path, 'a');
  let size = fstatSync(fd).size;
  let full = size >= max;
  let held = 0;
  const log: EgressLogger = (entry) => {
    if (fd === undefined || full) return;
    let line = `${JSON.stringify(entry)}\n`;
    if (size + Buffer.byteLength(line) > max) {
      full = true;
      line = `${JSON.stringify({ ...entry, decision: 'denied', rule: `the log reached its limit of ${max} bytes: later requests are refused` })}\n`;
    }
    try {
      writeSync(fd, line);
      size += Buffer.byteLength(line);
    } catch {
      full = true;
    }
  };
  // A getter, not a copied value: `full` changes as the log fills.
  return Object.defineProperties(log, {
    close: {
      value() {
        if (fd !== undefined) closeSync(fd);
        fd = undefined;
      },
    },
    full: { get: () => full || size + (held + 1) * LINE_ROOM > max },
    reserve: {
      value() {
        held++;
        let released = false;
        return () => {
          if (!released) held--;
          released = true;
        };
      },
    },
  }) as FileLogger;
}
