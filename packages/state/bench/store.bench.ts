// Store benchmark: upsert and get through SqliteForgeStateStore vs raw better-sqlite3
// running the same SQL with the same pragmas and the same prepared statements, in one
// run: each raw upsert turns its state into a row, each raw get reads the row as an
// array and makes the same object of it, as the store does, checking nothing (the
// store checks every field). Goal: ratio >= 0.8.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchRounds, benchSize, reportBench } from '@bb/tooling/bench';
import Database from 'better-sqlite3';
import { SqliteForgeStateStore, STATE_MIGRATIONS, STATE_SQL } from '../src/index';
import { cellsToRow, rowFields, stateToRow } from '../src/rows';
import { sampleState } from '../src/testing-data';

const N = benchSize(20_000, 2000);
// Odd, so the median is one round; each round measures both sides back to back.
const ROUNDS = benchRounds(9, 2);
const dir = mkdtempSync(join(tmpdir(), 'bb-bench-state-'));

function opsPerSec(fn: () => void): number {
  const t0 = process.hrtime.bigint();
  fn();
  const ns = Number(process.hrtime.bigint() - t0);
  return N / (ns / 1e9);
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const states = Array.from({ length: N }, (_, i) => sampleState(i + 1, { slug: `s-${i + 1}` }));

const store = new SqliteForgeStateStore({ path: join(dir, 'ours.db') });
const raw = new Database(join(dir, 'raw.db'));
raw.pragma('busy_timeout = 5000');
raw.pragma('journal_mode = WAL');
raw.pragma('synchronous = NORMAL');
raw.pragma('foreign_keys = ON');
raw.exec(STATE_MIGRATIONS[0]!.up as string);
const rawUpsert = raw.prepare(STATE_SQL.upsert);
// Rows as arrays, as the store reads them: the cheapest way better-sqlite3 hands a row back.
const rawGet = raw.prepare(STATE_SQL.get).raw(true);

// What the raw gets made is used, so none of it can be optimised away.
let sink = 0;
const up = { ours: [] as number[], raw: [] as number[] };
const get = { ours: [] as number[], raw: [] as number[] };
for (let r = 0; r < ROUNDS; r++) {
  // Alternate who goes first so neither always gets the warmer cache.
  const order = r % 2 === 0 ? ['ours', 'raw'] : ['raw', 'ours'];
  for (const who of order) {
    if (who === 'ours') {
      up.ours.push(
        opsPerSec(() => {
          for (const s of states) store.upsert(s);
        }),
      );
      get.ours.push(
        opsPerSec(() => {
          for (let i = 1; i <= N; i++) store.get('acme', 'widgets', i);
        }),
      );
    } else {
      up.raw.push(
        opsPerSec(() => {
          for (const s of states) rawUpsert.run(stateToRow(s));
        }),
      );
      get.raw.push(
        opsPerSec(() => {
          for (let i = 1; i <= N; i++) {
            // The same object the store returns, made the same way, with no check.
            const row = cellsToRow(rawGet.get('acme', 'widgets', i) as unknown[]);
            const state = rowFields(row) as Record<string, unknown>;
            state['bottleNames'] = JSON.parse(row.bottle_names);
            sink += state['slug'] === '' ? 1 : 0;
          }
        }),
      );
    }
  }
}
store.close();
raw.close();
if (sink !== 0) throw new Error('a raw get read a row with no slug');
rmSync(dir, { recursive: true, force: true });

// The ratio is the median of per-round ratios: both sides of a round ran under the
// same machine conditions, so this is steadier than a ratio of medians.
const ratios = (o: number[], b: number[]) => median(o.map((x, i) => x / b[i]!));
const upRatio = ratios(up.ours, up.raw);
const getRatio = ratios(get.ours, get.raw);
reportBench({
  name: 'state',
  metric: 'upsert ops/s (SqliteForgeStateStore vs raw better-sqlite3)',
  ours: median(up.raw) * upRatio,
  baseline: median(up.raw),
  goal: 0.8,
  higherIsBetter: true,
  extra: {
    rounds: ROUNDS,
    opsPerRound: N,
    getOpsPerSecOurs: Math.round(median(get.raw) * getRatio),
    getOpsPerSecRaw: Math.round(median(get.raw)),
    getRatio: Math.round(getRatio * 1000) / 1000,
  },
});
reportBench({
  name: 'state-get',
  metric: 'get ops/s (SqliteForgeStateStore vs raw better-sqlite3)',
  ours: median(get.raw) * getRatio,
  baseline: median(get.raw),
  goal: 0.8,
  higherIsBetter: true,
  extra: { rounds: ROUNDS, opsPerRound: N },
});
