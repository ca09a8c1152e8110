import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { readFileNoFollow, writeFileNoFollow } from '@bb/wall';
import {
  type DecisionFile,
  DecisionFileSchema,
  MAX_FILE_BYTES,
  REQUEST_ID,
  type RequestFile,
  RequestFileSchema,
} from './contract';

/**
 * The exchange between a bottle's supervise sidecar and the host: a directory
 * (`$BB_HOME/bottles/<slug>/supervise/`) the agent cannot reach. The sidecar
 * writes `requests/<id>.json`; the host, which keeps every request in its
 * database, answers with `decisions/<id>.json`. Files are written beside their
 * name and renamed, so neither side reads half of one.
 */
export class Exchange {
  readonly dir: string;
  constructor(dir: string) {
    this.dir = dir;
  }

  get requestsDir(): string {
    return join(this.dir, 'requests');
  }
  get decisionsDir(): string {
    return join(this.dir, 'decisions');
  }

  ensure(): void {
    for (const d of [this.requestsDir, this.decisionsDir])
      mkdirSync(d, { recursive: true, mode: 0o755 });
  }

  writeRequest(r: RequestFile): void {
    writeFileNoFollow(this.dir, `requests/${r.id}.json`, JSON.stringify(r));
  }

  /**
   * Written by the host into a directory the gate's user owns: nothing on the
   * way is followed (a link planted there is replaced, never written through).
   */
  writeDecision(d: DecisionFile): void {
    // The exchange itself sits in the host's bottle directory (nothing of the gate's on the way).
    mkdirSync(this.dir, { recursive: true, mode: 0o755 });
    writeFileNoFollow(this.dir, `decisions/${d.id}.json`, JSON.stringify(d));
  }

  /** Every well-formed request (a malformed or oversized file is skipped and named in `bad`). */
  requests(bad: string[] = []): RequestFile[] {
    return this.#read(this.requestsDir, RequestFileSchema, bad);
  }

  request(id: string): RequestFile | undefined {
    return this.#one(this.requestsDir, id, RequestFileSchema);
  }

  decision(id: string): DecisionFile | undefined {
    return this.#one(this.decisionsDir, id, DecisionFileSchema);
  }

  decisions(): DecisionFile[] {
    return this.#read(this.decisionsDir, DecisionFileSchema, []);
  }

  // Requests and decisions are written once and never change: each is parsed once.
  readonly #cache = new Map<string, unknown>();

  /** The request ids present, without reading the files. */
  requestIds(): string[] {
    if (!existsSync(this.requestsDir)) return [];
    return readdirSync(this.requestsDir)
      .map((n) => /^(sr_[a-z0-9]{20})\.json$/.exec(n)?.[1])
      .filter((x): x is string => !!x)
      .sort();
  }

  #one<T>(
    dir: string,
    id: string,
    schema: { safeParse(v: unknown): { success: boolean; data?: T } },
  ): T | undefined {
    if (!REQUEST_ID.test(id)) return undefined;
    const key = `${dir}/${id}`;
    if (this.#cache.has(key)) return this.#cache.get(key) as T;
    const v = this.#parse(dir, id, schema);
    if (v !== undefined) this.#cache.set(key, v);
    return v;
  }

  #parse<T>(
    dir: string,
    id: string,
    schema: { safeParse(v: unknown): { success: boolean; data?: T } },
  ): T | undefined {
    try {
      const buf = readFileNoFollow(dir, `${id}.json`, { maxBytes: MAX_FILE_BYTES * 2 + 16384 });
      if (!buf) return undefined;
      const parsed = schema.safeParse(JSON.parse(buf.toString('utf8')));
      return parsed.success ? parsed.data : undefined;
    } catch {
      return undefined;
    }
  }

  #read<T>(
    dir: string,
    schema: { safeParse(v: unknown): { success: boolean; data?: T } },
    bad: string[],
  ): T[] {
    if (!existsSync(dir)) return [];
    const out: T[] = [];
    for (const name of readdirSync(dir).sort()) {
      const m = /^(sr_[a-z0-9]{20})\.json$/.exec(name);
      if (!m) continue;
      const v = this.#one(dir, m[1]!, schema);
      if (v) out.push(v);
      else bad.push(name);
    }
    return out;
  }
}

export function newRequestId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const bytes = randomBytes(20);
  let id = 'sr_';
  for (const b of bytes) id += alphabet[b % 36];
  return id;
}
