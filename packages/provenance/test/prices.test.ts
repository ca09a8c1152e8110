// What model tokens cost: the built-in table, the operator's prices.json over it, and
// which entry prices a model (the whole name, or its start before a version or date).
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { costOf, DEFAULT_PRICES, loadPrices, priceOf } from '../src/prices';

const key = (model: string) => priceOf(DEFAULT_PRICES, model)?.key;

describe('prices', () => {
  it('prices a model by the longest entry naming it, before a version or a date', () => {
    expect(key('claude-sonnet-4-5-20250929')).toBe('claude-sonnet-4');
    expect(key('claude-opus-4-5-20251101')).toBe('claude-opus-4-5');
    expect(key('claude-opus-4-1-20250805')).toBe('claude-opus-4');
    expect(key('claude-3-5-haiku-latest')).toBe('claude-3-5-haiku');
    expect(key('gpt-5.1-codex')).toBe('gpt-5');
    expect(key('anthropic/claude-sonnet-4-5')).toBe('claude-sonnet-4');
  });

  it('never prices a dearer model as a cheaper one whose name starts it', () => {
    expect(key('gpt-5-pro-2025-10-06')).toBe('gpt-5-pro');
    expect(key('o3-pro')).toBe('o3-pro');
    expect(key('o1-pro')).toBe('o1-pro');
    // One the table does not know is as dear as the dearest it knows.
    expect(key('gpt-7-ultra')).toBe('*');
    const dearest = Math.max(
      ...Object.entries(DEFAULT_PRICES)
        .filter(([k]) => k !== '*')
        .map(([, p]) => p.output),
    );
    expect(DEFAULT_PRICES['*']!.output).toBeGreaterThanOrEqual(dearest);
  });

  it('costs each kind of token at its rate (cache reads and writes at the input rate when unset)', () => {
    expect(
      costOf(
        { input: 1e6, output: 1e6, cacheRead: 1e6, cacheWrite: 1e6 },
        { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 },
      ),
    ).toBeCloseTo(22.05, 9);
    expect(
      costOf({ input: 0, output: 0, cacheRead: 2e6, cacheWrite: 0 }, { input: 2, output: 8 }),
    ).toBe(4);
  });

  it("an operator's prices.json replaces or adds entries; one that is not valid names the entry", () => {
    const config = mkdtempSync(join(tmpdir(), 'bb-prices-'));
    expect(loadPrices(config)).toBe(DEFAULT_PRICES);
    writeFileSync(
      join(config, 'prices.json'),
      JSON.stringify({
        models: {
          'claude-sonnet-4': { input: 1, output: 2 },
          'local-llama': { input: 0, output: 0 },
        },
      }),
    );
    const table = loadPrices(config);
    expect(table['claude-sonnet-4']).toEqual({ input: 1, output: 2 });
    expect(priceOf(table, 'local-llama-3')?.key).toBe('local-llama');
    expect(priceOf(table, 'local-llamafile')?.key).toBe('*');
    expect(priceOf(table, 'local-llama')?.key).toBe('local-llama');
    expect(table['gpt-5']).toEqual(DEFAULT_PRICES['gpt-5']);
    const bad = join(config, 'bad');
    mkdirSync(bad);
    writeFileSync(
      join(bad, 'prices.json'),
      JSON.stringify({ models: { x: { input: -1, output: 2 } } }),
    );
    expect(() => loadPrices(bad)).toThrow(/prices\.json is not a price table: models\.x\.input: /);
    writeFileSync(join(bad, 'prices.json'), '{');
    expect(() => loadPrices(bad)).toThrow(/cannot be read as JSON/);
  });
});
