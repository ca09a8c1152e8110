/**
 * What model tokens cost, to estimate a run's spend: built-in defaults for the
 * models the providers use, which an operator overrides or extends in
 * `$BB_HOME/config/prices.json`. Prices are US dollars per million tokens; a
 * model is priced by the longest name prefix the table holds, and one no entry
 * matches by the `*` entry (priced high on purpose: an unknown model is never
 * free).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { z } from 'zod';

const perMillion = z.number().nonnegative().max(100_000);

export const PriceSchema = z
  .object({
    input: perMillion,
    output: perMillion,
    /** Reading cached input. @default input */
    cacheRead: perMillion.optional(),
    /** Writing the cache. @default input */
    cacheWrite: perMillion.optional(),
  })
  .strict();
export type Price = z.infer<typeof PriceSchema>;

export const PricesFileSchema = z
  .object({
    /** Model name prefix (or `*`) → its price. */
    models: z.record(z.string().min(1).max(128), PriceSchema),
  })
  .strict();

/** Model name prefix (or `*`) → price in USD per million tokens. */
export type PriceTable = Readonly<Record<string, Price>>;

/** List prices (USD per million tokens) of the models claude, codex and pi use by default. */
export const DEFAULT_PRICES: PriceTable = {
  'claude-opus-4-5': { input: 5, output: 25, cacheRead: 0.5, cacheWrite: 6.25 },
  'claude-opus-4': { input: 15, output: 75, cacheRead: 1.5, cacheWrite: 18.75 },
  'claude-sonnet-4': { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
  'claude-haiku-4-5': { input: 1, output: 5, cacheRead: 0.1, cacheWrite: 1.25 },
  'claude-3-5-haiku': { input: 0.8, output: 4, cacheRead: 0.08, cacheWrite: 1 },
  'claude-3-7-sonnet': { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
  'gpt-5': { input: 1.25, output: 10, cacheRead: 0.125 },
  'gpt-5-codex': { input: 1.25, output: 10, cacheRead: 0.125 },
  'gpt-5-mini': { input: 0.25, output: 2, cacheRead: 0.025 },
  'gpt-5-nano': { input: 0.05, output: 0.4, cacheRead: 0.005 },
  'gpt-5-pro': { input: 15, output: 120 },
  'gpt-4.1': { input: 2, output: 8, cacheRead: 0.5 },
  'gpt-4o': { input: 2.5, output: 10, cacheRead: 1.25 },
  'gpt-4o-mini': { input: 0.15, output: 0.6, cacheRead: 0.075 },
  'gpt-4.1-mini': { input: 0.4, output: 1.6, cacheRead: 0.1 },
  'gpt-4.1-nano': { input: 0.1, output: 0.4, cacheRead: 0.025 },
  o1: { input: 15, output: 60, cacheRead: 7.5 },
  'o1-pro': { input: 150, output: 600 },
  o3: { input: 2, output: 8, cacheRead: 0.5 },
  'o3-pro': { input: 20, output: 80 },
  'o3-mini': { input: 1.1, output: 4.4, cacheRead: 0.55 },
  'o4-mini': { input: 1.1, output: 4.4, cacheRead: 0.275 },
  // As dear as the dearest model above: an unknown model is never counted cheap.
  '*': { input: 150, output: 600 },
};

/**
 * The price table: the defaults with `$BB_HOME/config/prices.json` over them
 * (an entry there replaces the default of the same name). A file that is not
 * valid is an INVALID_INPUT naming it and the entry.
 */
export function loadPrices(configDir: string): PriceTable {
  const file = join(configDir, 'prices.json');
  if (!existsSync(file)) return DEFAULT_PRICES;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `${file} cannot be read as JSON (${(err as Error).message}); fix it or remove it to use the built-in prices`,
    );
  }
  const parsed = PricesFileSchema.safeParse(raw);
  if (!parsed.success)
    throw new BbError(
      'INVALID_INPUT',
      `${file} is not a price table: ${parsed.error.issues.map((i) => `${i.path.join('.') || '(top)'}: ${i.message}`).join('; ')}. Write {"models": {"<model prefix>": {"input": 3, "output": 15}}} (USD per million tokens)`,
    );
  return { ...DEFAULT_PRICES, ...parsed.data.models };
}

/**
 * Whether table entry `key` names `model`: the whole name, or its start followed by a
 * version or date (`-5`, `.1`, `-20250929`) or `-latest`. So `gpt-5` prices
 * `gpt-5-2025-08-07` and `gpt-5.1`, never `gpt-5-pro`; a provider's prefix
 * (`anthropic/`) is not part of the name.
 */
function names(key: string, model: string): boolean {
  if (model === key) return true;
  if (!model.startsWith(key)) return false;
  const rest = model.slice(key.length);
  return /^[-.@:_]\d/.test(rest) || rest === '-latest';
}

/** The entry that prices `model`: the longest entry that names it, else `*`. */
export function priceOf(
  table: PriceTable,
  model: string | undefined,
): { key: string; price: Price } | undefined {
  let best: string | undefined;
  const name = model?.split('/').at(-1);
  if (name)
    for (const key of Object.keys(table))
      if (key !== '*' && names(key, name) && key.length > (best?.length ?? 0)) best = key;
  const key = best ?? (table['*'] ? '*' : undefined);
  return key ? { key, price: table[key]! } : undefined;
}

/** Tokens of each kind. */
export interface TokenCounts {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
}

/** What `tokens` cost at `price`, in US dollars. */
export function costOf(tokens: TokenCounts, price: Price): number {
  return (
    (tokens.input * price.input +
      tokens.output * price.output +
      tokens.cacheRead * (price.cacheRead ?? price.input) +
      tokens.cacheWrite * (price.cacheWrite ?? price.input)) /
    1_000_000
  );
}
