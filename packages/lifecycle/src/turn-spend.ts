/**
 * What a running turn has used so far, from its bottle's logs as they grow: the
 * answers its credential proxy metered (egress log) and the comments its
 * sidecar posted (op log). Each pass reads only what was added since the last.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { join } from 'node:path';
import type { BottleStorage } from '@bb/headless';
import { meteredUsage, type PriceTable, totalTokens, type Usage } from '@bb/provenance';
import type { TurnSpend } from './budget';

/** How much of a log one pass reads at most (the rest on the next pass). */
const READ_MAX = 8 * 1024 * 1024;

/** One line of a bottle's egress log (`@bb/egress`), as metering reads it. */
type EgressLogEntry = Parameters<typeof meteredUsage>[0][number];

/**
 * The bottles' egress and op logs, read as they grow: each pass reads only what
 * was added since the last (the logs are the gate's, up to 64 MiB), and keeps
 * only the lines budgets count (metered answers, posted comments) of the turn.
 */
export class TurnLogs {
  readonly #turns = new Map<
    string,
    {
      since: string;
      files: Record<'egress' | 'ops', { offset: number; rest: string }>;
      answers: EgressLogEntry[];
      comments: number;
    }
  >();

  /** What the turn of `slug` that started at `since` used so far. */
  async spend(
    storage: BottleStorage,
    slug: string,
    since: string,
    prices: PriceTable,
  ): Promise<TurnSpend & { usage?: Usage }> {
    let t = this.#turns.get(slug);
    if (!t || t.since !== since) {
      t = {
        since,
        files: { egress: { offset: 0, rest: '' }, ops: { offset: 0, rest: '' } },
        answers: [],
        comments: 0,
      };
      this.#turns.set(slug, t);
    }
    const dir = join((await storage.evidence(slug)).dir, 'state');
    const from = Date.parse(since);
    for (const line of newLines(join(dir, 'egress.jsonl'), t.files.egress, '"usage"')) {
      const e = parsed<EgressLogEntry>(line);
      if (e?.usage && Date.parse(e.time) >= from) t.answers.push(e);
    }
    for (const line of newLines(join(dir, 'ops.jsonl'), t.files.ops, '"post_comment"')) {
      const e = parsed<{ method?: string; outcome?: string; time?: string }>(line);
      if (e?.method === 'post_comment' && e.outcome === 'ok' && Date.parse(e.time ?? '') >= from)
        t.comments++;
    }
    const usage = meteredUsage(t.answers, since, prices);
    return {
      tokens: usage ? totalTokens(usage) : 0,
      usd: usage?.costUsd ?? 0,
      comments: t.comments,
      ...(usage ? { usage } : {}),
    };
  }

  /** The turn of `slug` ended: what was kept of it goes. */
  forget(slug: string): void {
    this.#turns.delete(slug);
  }
}

const parsed = <T>(line: string): T | undefined => {
  try {
    return JSON.parse(line) as T;
  } catch {
    return undefined; // an unreadable line is the record's to report
  }
};

/** The whole lines `file` gained since `at` (which moves on) that contain `needle`. */
function newLines(file: string, at: { offset: number; rest: string }, needle: string): string[] {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch {
    return []; // not written yet
  }
  try {
    const size = fstatSync(fd).size;
    if (size < at.offset) {
      // A new log (the bottle was rebuilt): read from its start.
      at.offset = 0;
      at.rest = '';
    }
    const n = Math.min(size - at.offset, READ_MAX);
    if (n <= 0) return [];
    const buf = Buffer.alloc(n);
    readSync(fd, buf, 0, n, at.offset);
    at.offset += n;
    const text = at.rest + buf.toString('utf8');
    const end = text.lastIndexOf('\n');
    at.rest = end < 0 ? text : text.slice(end + 1);
    if (at.rest.length > 1024 * 1024) at.rest = ''; // no line is that long
    return end < 0
      ? []
      : text
          .slice(0, end)
          .split('\n')
          .filter((l) => l.includes(needle));
  } finally {
    closeSync(fd);
  }
}
