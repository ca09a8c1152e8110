import { closeSync, fstatSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import type { ModelUsage } from './usage-meter';

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
  /** Credential proxy: what a model's answer said it used (see `UsageMeter`). */
  usage?: ModelUsage;
  bytesUp: number;
  bytesDown: number;
  durationMs: number;
  /** What else the line must say (a tunnel whose bytes could not be counted). */
  note?: string;
}

export type EgressLogger = (entry: EgressLogEntry) => void;

/**
 * Room held in a log for one allowed request's closing line. Call it with the
 * entry to write that line into the room, or with nothing to give the room
 * back; only the first call counts.
 */
export type LogTicket = (entry?: EgressLogEntry) => void;

/** A ticket that acts once: `use` gets the entry (or nothing) of its first call only. */
function ticket(use: (entry?: EgressLogEntry) => void): LogTicket {
  let used = false;
  return (entry) => {
    if (used) return;
    used = true;
    use(entry);
  };
}

/** A ticket for a log that holds no room (a plain logger): it logs once, or not at all. */
export function plainTicket(log: EgressLogger): LogTicket {
  return ticket((entry) => entry && log(entry));
}

/**
 * A file logger. `full` once it cannot promise room for one more line: each
 * allowed request or tunnel holds room for its closing line (`reserve()`), so
 * what was allowed is always logged, and lines nobody reserved (denials) never
 * take that room. The proxies refuse new requests while it is full.
 */
export type FileLogger = EgressLogger & {
  close(): void;
  readonly full: boolean;
  /** Lines whose room is held now (requests and tunnels allowed and not ended yet). */
  readonly held: number;
  /** Hold room for one line (an allowed request's closing line); ask `full` first. */
  reserve(): LogTicket;
};

/** Room kept for each line a connection still has to log; no line is longer. */
export const LINE_ROOM = 2048;

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n)}…` : s);

/** The entry as one JSON line of at most LINE_ROOM bytes: long texts are cut, never the numbers. */
export function logLine(entry: EgressLogEntry): string {
  for (const n of [256, 32]) {
    const line = `${JSON.stringify({
      ...entry,
      host: clip(entry.host, n),
      rule: clip(entry.rule, n),
      ...(entry.method === undefined ? {} : { method: clip(entry.method, 32) }),
      ...(entry.route === undefined ? {} : { route: clip(entry.route, n) }),
      ...(entry.auth === undefined
        ? {}
        : { auth: entry.auth.slice(0, n === 32 ? 4 : 8).map((a) => clip(a, n === 32 ? 32 : 64)) }),
    })}\n`;
    if (Buffer.byteLength(line) <= LINE_ROOM) return line;
  }
  // Unreachable with the cuts above (texts are at most 2 bytes a character); kept as a bound.
  return `${JSON.stringify({ ...entry, host: '', rule: 'entry too long to log', method: undefined, route: undefined, auth: undefined })}\n`;
}

/**
 * Append entries as JSON lines to a file; `close()` releases it. Nothing is
 * ever written past `maxBytes`: room is kept for every reserved line and for
 * one closing note. A line that finds no room (only unreserved ones can) is
 * dropped, the note says the log reached its limit, and `full` stays true: the
 * proxies then refuse what they could no longer log.
 */
export function fileLogger(path: string, options: { maxBytes?: number } = {}): FileLogger {
  const max = options.maxBytes ?? 64 * 1024 * 1024;
  mkdirSync(dirname(path), { recursive: true });
  // Opened once in append mode: each entry is one write(2) of a whole line.
  let fd: number | undefined = openSync(path, 'a');
  let size = fstatSync(fd).size;
  let held = 0;
  let noted = false;
  // Room that must stay free: the held lines', and the closing note's until it is written.
  const kept = () => held * LINE_ROOM + (noted ? 0 : LINE_ROOM);
  const write = (line: string) => {
    if (fd === undefined) return;
    try {
      writeSync(fd, line);
      size += Buffer.byteLength(line);
    } catch {
      noted = true; // a log that cannot be written is as good as full
    }
  };
  const append = (entry: EgressLogEntry) => {
    if (fd === undefined) return;
    const line = logLine(entry);
    if (size + Buffer.byteLength(line) + kept() <= max) {
      write(line);
      return;
    }
    if (noted) return;
    noted = true;
    write(
      logLine({
        time: entry.time,
        kind: entry.kind,
        host: '',
        port: 0,
        decision: 'denied',
        rule: `the log reached its limit of ${max} bytes: later requests are refused`,
        bytesUp: 0,
        bytesDown: 0,
        durationMs: 0,
      }),
    );
  };
  const log: EgressLogger = (entry) => append(entry);
  // A getter, not a copied value: `full` changes as the log fills.
  return Object.defineProperties(log, {
    close: {
      value() {
        if (fd !== undefined) closeSync(fd);
        fd = undefined;
      },
    },
    full: { get: () => noted || size + kept() + LINE_ROOM > max },
    held: { get: () => held },
    reserve: {
      value(): LogTicket {
        held++;
        return ticket((entry) => {
          held--;
          // The line goes into the room just given back, so it always fits.
          if (entry) append(entry);
        });
      },
    },
  }) as FileLogger;
}
