/**
 * Budgets and the loop breaker: what one turn, one issue and the whole org may
 * spend, and how many comments or fruitless turns an agent may make, before it
 * is stopped, frozen with its session, and the thread is asked whether to go
 * on. Spend is the credential proxy's metering (the model API's figures), read
 * from the bottle's egress log as the turn runs; what earlier turns spent is
 * in their records.
 */
import type { BottleStorage } from '@bb/headless';
import {
  DEFAULT_PRICES,
  type PriceTable,
  type RunRecordStore,
  spendSince,
  totalTokens,
} from '@bb/provenance';
import type { Fired } from './session';

/** What one agent may spend. Absent fields: no cap of that kind. */
export interface Budget {
  /** Minutes one turn may run (waiting for the operator not counted). */
  turnMinutes?: number | undefined;
  /** Tokens one turn may use (every kind: input, output, cache read and write). */
  turnTokens?: number | undefined;
  /** Estimated US dollars one turn may spend. */
  turnUsd?: number | undefined;
  /** Tokens one issue's bottle may use over all its turns. */
  issueTokens?: number | undefined;
  /** Estimated US dollars one issue's bottle may spend over all its turns. */
  issueUsd?: number | undefined;
}

/** The orchestrator's budget rules. */
export interface BudgetPolicy {
  /** Every agent's budget, under what its manifest's `budget` says. @default DEFAULT_BUDGET */
  defaults?: Budget;
  /** Tokens all agents together may use in a day (UTC); past it, new turns wait. */
  dayTokens?: number | undefined;
  /** Estimated US dollars all agents together may spend in a day (UTC). */
  dayUsd?: number | undefined;
  /**
   * What wakes an agent stopped at a cap: `/bb continue` only (`command`), or
   * any reply that would wake it (`reply`). @default 'command'
   */
  resume?: 'command' | 'reply';
  /** Turns in a row without a new push before the thread is asked. @default 8 */
  maxIdleTurns?: number;
  /** Comments one turn may post before it is stopped and the thread asked. @default 20 */
  maxTurnComments?: number;
}

/** Caps every agent has unless the operator or its manifest says otherwise. */
export const DEFAULT_BUDGET: Budget = { turnMinutes: 120 };

/** What `/bb continue --budget …` gives: the next turn's caps, and as much again for the issue. */
export interface Grant {
  tokens?: number;
  usd?: number;
  minutes?: number;
}

/** A bottle stopped at a cap, waiting to be told to go on. */
export interface Hold {
  /** What was reached, in words ("its budget of 200,000 tokens per turn"). */
  what: string;
  at: string;
}

/** What `/bb continue` last gave a bottle: the issue's spend it counts from, and the caps it raised. */
export interface Allowance {
  from: { tokens: number; usd: number };
  grant?: Grant;
  /** Turns without a push are counted from this turn. */
  idleFrom?: number;
}

const HOLD = 'budget-hold';
const ALLOWANCE = 'budget-allowance';

const readJson = async <T>(storage: BottleStorage, slug: string, name: string) => {
  const text = await storage.readNote(slug, name).catch(() => undefined);
  if (!text) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
};

export const readHold = (storage: BottleStorage, slug: string) =>
  readJson<Hold>(storage, slug, HOLD);
export const writeHold = (storage: BottleStorage, slug: string, hold: Hold) =>
  storage.writeNote(slug, HOLD, JSON.stringify(hold));
export const clearHold = (storage: BottleStorage, slug: string) => storage.removeNote(slug, HOLD);
export const readAllowance = (storage: BottleStorage, slug: string) =>
  readJson<Allowance>(storage, slug, ALLOWANCE);
export const writeAllowance = (storage: BottleStorage, slug: string, a: Allowance) =>
  storage.writeNote(slug, ALLOWANCE, JSON.stringify(a));

/** How a thread goes on with a bottle stopped at a cap (said wherever it is told it stopped). */
export const CONTINUE_HINT =
  'Reply /bb continue to have it go on (/bb continue --budget 500k, --budget $5 or --budget 90min for a different budget for the next turn).';

/** A number of tokens as people write it (`500000`, `500k`, `2m`), or undefined. */
export function tokenAmount(text: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)([km]?)$/i.exec(text.trim());
  if (!m) return undefined;
  return Math.round(
    Number(m[1]) * { '': 1, k: 1e3, m: 1e6 }[m[2]!.toLowerCase() as '' | 'k' | 'm'],
  );
}

/** `/bb continue` at the start of a comment (a supervise command is something else). */
export const CONTINUE = /^\s*\/bb\s+continue\b/i;

/**
 * The grant of a `/bb continue [--budget …]` comment: `--budget 500k` (tokens,
 * `k` or `m` for thousands or millions), `--budget $5` (US dollars) or
 * `--budget 90min`. An error names what could not be read.
 */
export function parseContinue(body: string): { grant: Grant } | { error: string } | undefined {
  const m = CONTINUE.exec(body);
  if (!m) return undefined;
  const rest = body.slice(m[0].length).split('\n')[0]!.trim();
  if (!rest) return { grant: {} };
  const b = /^--budget(?:=|\s+)(\S+)$/i.exec(rest);
  const v = b?.[1];
  const usage =
    'write `/bb continue`, or give a budget: `/bb continue --budget 500k` (tokens), `--budget $5` or `--budget 90min`';
  if (!v) return { error: `cannot read "${rest.slice(0, 60)}": ${usage}` };
  const dollars = /^\$(\d+(?:\.\d+)?)$/.exec(v);
  if (dollars) return { grant: { usd: Number(dollars[1]) } };
  const minutes = /^(\d+)min$/i.exec(v);
  if (minutes) return { grant: { minutes: Number(minutes[1]) } };
  const tokens = tokenAmount(v);
  if (tokens !== undefined) return { grant: { tokens } };
  return { error: `cannot read the budget "${v.slice(0, 40)}": ${usage}` };
}

/** Minutes as people say them: seconds under a minute, else minutes. */
const span = (minutes: number) =>
  minutes < 1 ? `${Math.round(minutes * 60)} s` : `${Math.round(minutes)} min`;

const thousands = (n: number) => Math.round(n).toLocaleString('en-US');
const usd = (n: number) => `$${n.toFixed(2)}`;

/** A turn's spend so far. */
export interface TurnSpend {
  tokens: number;
  usd: number;
  comments: number;
}

/** The budget of an agent: the policy's defaults, its manifest's over them, a grant over both. */
export function budgetFor(
  policy: BudgetPolicy | undefined,
  manifest: Budget | undefined,
  grant: Grant | undefined,
): Budget {
  const b: Budget = { ...(policy?.defaults ?? DEFAULT_BUDGET), ...definedOf(manifest) };
  if (grant?.tokens !== undefined) {
    b.turnTokens = grant.tokens;
    if (b.issueTokens !== undefined) b.issueTokens = grant.tokens;
  }
  if (grant?.usd !== undefined) {
    b.turnUsd = grant.usd;
    if (b.issueUsd !== undefined) b.issueUsd = grant.usd;
  }
  if (grant?.minutes !== undefined) b.turnMinutes = grant.minutes;
  return b;
}

const definedOf = (b: Budget | undefined): Budget =>
  Object.fromEntries(Object.entries(b ?? {}).filter(([, v]) => v !== undefined));

/** What has been spent, to hold against the caps. */
export interface Spent {
  turn: TurnSpend;
  /** The bottle's turns before this one, less what a `/bb continue` counted from. */
  issue: { tokens: number; usd: number };
  /** Every run today (UTC), this turn included. */
  day: { tokens: number; usd: number };
  minutes: number;
}

/** The cap `spent` reached, as the watchdog fires for it; undefined when none is. */
export function capReached(
  b: Budget,
  policy: BudgetPolicy | undefined,
  spent: Spent,
): Fired | undefined {
  const over = (what: string, used: string) => ({
    reason: 'budget' as const,
    detail: `it used ${used}, over its budget of ${what}`,
  });
  if (b.turnMinutes !== undefined && spent.minutes > b.turnMinutes)
    return {
      reason: 'wall_time',
      detail: `it ran for ${span(spent.minutes)}, over its limit of ${span(b.turnMinutes)} a turn`,
    };
  if (b.turnTokens !== undefined && spent.turn.tokens > b.turnTokens)
    return over(
      `${thousands(b.turnTokens)} tokens a turn`,
      `${thousands(spent.turn.tokens)} tokens`,
    );
  if (b.turnUsd !== undefined && spent.turn.usd > b.turnUsd)
    return over(`${usd(b.turnUsd)} a turn`, `about ${usd(spent.turn.usd)}`);
  const issueTokens = spent.issue.tokens + spent.turn.tokens;
  if (b.issueTokens !== undefined && issueTokens > b.issueTokens)
    return over(
      `${thousands(b.issueTokens)} tokens for this issue`,
      `${thousands(issueTokens)} tokens`,
    );
  const issueUsd = spent.issue.usd + spent.turn.usd;
  if (b.issueUsd !== undefined && issueUsd > b.issueUsd)
    return over(`${usd(b.issueUsd)} for this issue`, `about ${usd(issueUsd)}`);
  const day = dayCapReached(policy, spent.day);
  if (day) return { reason: 'budget', detail: day };
  const max = policy?.maxTurnComments ?? 20;
  if (spent.turn.comments > max)
    return {
      reason: 'loop',
      detail: `it posted ${spent.turn.comments} comments in one turn (the limit is ${max})`,
    };
  return undefined;
}

/** Why the org's daily cap stops new work, or undefined. */
export function dayCapReached(
  policy: BudgetPolicy | undefined,
  day: { tokens: number; usd: number },
): string | undefined {
  if (policy?.dayTokens !== undefined && day.tokens >= policy.dayTokens)
    return `the agents used ${thousands(day.tokens)} tokens today, the organisation's daily budget of ${thousands(policy.dayTokens)}`;
  if (policy?.dayUsd !== undefined && day.usd >= policy.dayUsd)
    return `the agents spent about ${usd(day.usd)} today, the organisation's daily budget of ${usd(policy.dayUsd)}`;
  return undefined;
}

/**
 * What earlier runs spent, from their records: a bottle's turns, and the whole
 * org's today. Read at most once a minute (today's) or once a turn (a bottle's).
 */
export class SpendLedger {
  readonly #store: RunRecordStore;
  readonly prices: PriceTable;
  #day: { day: string; at: number; tokens: number; usd: number } | undefined;
  readonly #bottles = new Map<string, { turns: number; tokens: number; usd: number }>();

  constructor(store: RunRecordStore, prices: PriceTable = DEFAULT_PRICES) {
    this.#store = store;
    this.prices = prices;
  }

  /** What the org's runs recorded today (UTC) spent. */
  async today(now = Date.now()): Promise<{ tokens: number; usd: number }> {
    const day = new Date(now).toISOString().slice(0, 10);
    if (this.#day && this.#day.day === day && now - this.#day.at < 60_000) return this.#day;
    const lines = await spendSince(this.#store, `${day}T00:00:00.000Z`);
    this.#day = {
      day,
      at: now,
      tokens: lines.reduce((n, l) => n + l.tokens, 0),
      usd: lines.reduce((n, l) => n + l.costUsd, 0),
    };
    return this.#day;
  }

  /** What a bottle's recorded turns spent (read again when it has more turns than last time). */
  async bottle(slug: string, turns: number): Promise<{ tokens: number; usd: number }> {
    const cached = this.#bottles.get(slug);
    if (cached && cached.turns === turns) return cached;
    const chain = await this.#store.chain(slug);
    const sum = {
      turns,
      tokens: chain.reduce((n, s) => n + (s.record.usage ? totalTokens(s.record.usage) : 0), 0),
      usd: chain.reduce((n, s) => n + (s.record.usage?.costUsd ?? 0), 0),
    };
    this.#bottles.set(slug, sum);
    return sum;
  }

  /** A run was recorded: today's figure is read again. */
  recorded(): void {
    this.#day = undefined;
  }
}
