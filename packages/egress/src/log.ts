import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
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

/** Append entries as JSON lines to a file; `close()` releases it. */
export function fileLogger(path: string): EgressLogger & { close(): void } {
  mkdirSync(dirname(path), { recursive: true });
  // Opened once in append mode: each entry is one write(2) of a whole line.
  let fd: number | undefined = openSync(path, 'a');
  const log: EgressLogger = (entry) => {
    if (fd !== undefined) writeSync(fd, `${JSON.stringify(entry)}\n`);
  };
  return Object.assign(log, {
    close() {
      if (fd !== undefined) closeSync(fd);
      fd = undefined;
    },
  });
}
