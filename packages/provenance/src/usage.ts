/**
 * A turn's model usage and its estimated cost, as the bottle's credential
 * proxy metered it (the model API's own figures, never the agent's), and the
 * spend of many runs summed per day, per agent and per issue.
 */
import { type EgressLogEntry, parseEgressLog } from '@bb/egress';
import { BbError } from '@bb/errors';
import { z } from 'zod';
import { costOf, type PriceTable, priceOf, type TokenCounts } from './prices';
import type { SignedRecord } from './record';
import type { RunFilter, RunRecordStore } from './store';

const count = z.number().int().nonnegative();

const ModelLine = z.object({
  model: z.string(),
  requests: count,
  input: count,
  output: count,
  cacheRead: count,
  cacheWrite: count,
  /** Answers that did not say their usage in full (counted from their bytes). */
  estimated: count,
  /** The price table entry used (`*`: the model has no price of its own). */
  priced: z.string().optional(),
  costUsd: z.number().nonnegative().optional(),
});

/** The "usage" section of a run record. */
export const UsageSchema = z.object({
  input: count,
  output: count,
  cacheRead: count,
  cacheWrite: count,
  /** Estimated from the price table in force when the record was made. */
  costUsd: z.number().nonnegative(),
  models: z.array(ModelLine),
});
export type Usage = z.infer<typeof UsageSchema>;

const KINDS = ['input', 'output', 'cacheRead', 'cacheWrite'] as const;

/** Every token the model processed: input, output and cache, read and written. */
export const totalTokens = (t: TokenCounts): number =>
  t.input + t.output + t.cacheRead + t.cacheWrite;

/** Parse an egress log's lines; unreadable ones are skipped. */
export const egressEntries = parseEgressLog;

/**
 * What the model answers logged at or after `since` (ISO time) used, per model
 * and in all, priced from `prices`. Undefined when no answer was metered.
 */
export function meteredUsage(
  entries: EgressLogEntry[],
  since: string,
  prices: PriceTable,
): Usage | undefined {
  const from = Date.parse(since);
  const by = new Map<string, z.infer<typeof ModelLine>>();
  for (const e of entries) {
    const u = e.usage;
    if (e.kind !== 'credential' || !u || !(Date.parse(e.time) >= from)) continue;
    const model = typeof u.model === 'string' && u.model ? u.model : 'unknown';
    const line = by.get(model) ?? {
      model,
      requests: 0,
      input: 0,
      output: 0,
      cacheRead: 0,
      cacheWrite: 0,
      estimated: 0,
    };
    line.requests++;
    for (const k of KINDS) line[k] += Number.isSafeInteger(u[k]) && u[k] > 0 ? u[k] : 0;
    if (!u.reported) line.estimated++;
    by.set(model, line);
  }
  if (!by.size) return undefined;
  const models = [...by.values()].sort((a, b) => a.model.localeCompare(b.model));
  const total: Usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, costUsd: 0, models };
  for (const m of models) {
    const p = priceOf(prices, m.model === 'unknown' ? undefined : m.model);
    if (p) {
      m.priced = p.key;
      m.costUsd = round(costOf(m, p.price));
      total.costUsd += m.costUsd;
    }
    for (const k of KINDS) total[k] += m[k];
  }
  total.costUsd = round(total.costUsd);
  return total;
}

const round = (usd: number) => Math.round(usd * 1e6) / 1e6;

/** One run's spend, as the summaries count it. */
export interface SpendLine {
  day: string;
  agent: string;
  /** `owner/repo#issue`, or the bottle's slug for a run with no issue. */
  issue: string;
  tokens: number;
  costUsd: number;
}

export const spendOf = (s: SignedRecord): SpendLine => {
  const r = s.record;
  return {
    day: r.startedAt.slice(0, 10),
    agent: r.agent,
    issue: r.forge ? `${r.forge.owner}/${r.forge.repo}#${r.forge.issue}` : r.slug,
    tokens: r.usage ? totalTokens(r.usage) : 0,
    costUsd: r.usage?.costUsd ?? 0,
  };
};

export interface SpendRow {
  key: string;
  turns: number;
  tokens: number;
  costUsd: number;
}

/** Spend summed per day, per agent and per issue (the most expensive first), since a time. */
export interface SpendSummary {
  since: string;
  total: Omit<SpendRow, 'key'>;
  byDay: SpendRow[];
  byAgent: SpendRow[];
  topIssues: SpendRow[];
}

export function summarizeSpend(lines: SpendLine[], since: string, top = 10): SpendSummary {
  const sum = (key: (l: SpendLine) => string) => {
    const m = new Map<string, SpendRow>();
    for (const l of lines) {
      const k = key(l);
      const row = m.get(k) ?? { key: k, turns: 0, tokens: 0, costUsd: 0 };
      row.turns++;
      row.tokens += l.tokens;
      row.costUsd = round(row.costUsd + l.costUsd);
      m.set(k, row);
    }
    return [...m.values()];
  };
  const dearest = (a: SpendRow, b: SpendRow) => b.costUsd - a.costUsd || b.tokens - a.tokens;
  return {
    since,
    total: {
      turns: lines.length,
      tokens: lines.reduce((n, l) => n + l.tokens, 0),
      costUsd: round(lines.reduce((n, l) => n + l.costUsd, 0)),
    },
    byDay: sum((l) => l.day).sort((a, b) => a.key.localeCompare(b.key)),
    byAgent: sum((l) => l.agent).sort(dearest),
    topIssues: sum((l) => l.issue)
      .sort(dearest)
      .slice(0, top),
  };
}

/** The spend of every run a store holds that started at or after `since` (newest first, paged). */
export async function spendSince(
  store: RunRecordStore,
  since: string,
  filter: RunFilter = {},
): Promise<SpendLine[]> {
  const from = Date.parse(since);
  const out: SpendLine[] = [];
  for (let page = 1; ; page++) {
    const { records } = await store.list(filter, page, 200);
    for (const s of records) {
      if (!(Date.parse(s.record.startedAt) >= from)) return out;
      out.push(spendOf(s));
    }
    if (records.length < 200) return out;
  }
}

/**
 * The start of a window given as a span back from `now` (`7d`, `24h`, `90m`,
 * `2w`) or as a date or time (`2026-11-01`, ISO). An INVALID_INPUT names what
 * could not be read.
 */
export function sinceOf(text: string, now = Date.now()): string {
  const span = /^(\d{1,6})([mhdw])$/.exec(text.trim());
  if (span) {
    const unit = { m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[
      span[2] as 'm' | 'h' | 'd' | 'w'
    ];
    return new Date(now - Number(span[1]) * unit).toISOString();
  }
  const at = /^\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:\d{2})?)?$/.test(text.trim())
    ? Date.parse(text.trim())
    : Number.NaN;
  if (Number.isNaN(at))
    throw new BbError(
      'INVALID_INPUT',
      `cannot read the time ${JSON.stringify(text)}: give a span back from now (7d, 24h, 90m, 2w) or a date (2026-11-01)`,
    );
  return new Date(at).toISOString();
}
