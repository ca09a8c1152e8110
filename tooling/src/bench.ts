/**
 * @module
 * Benchmark reporting: every benchmark compares us with a baseline measured in the
 * same run and writes `bench/results/<name>.json` at the repository root.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface BenchResult {
  name: string;
  metric: string;
  ours: number;
  baseline: number;
  ratio: number;
  target: string;
  pass: boolean;
  /** Extra figures worth reporting (absolute times, memory, ...). */
  extra?: Record<string, number | string>;
  /** Measured in quick mode (a few rounds): the figure shows it runs, its goal is not judged. */
  quick?: true;
}

/**
 * `pnpm bench --quick` (`BB_BENCH_QUICK=1`): each benchmark runs a few rounds, to
 * show that it runs and writes its result. Its goal is not judged: a few rounds
 * on a busy CI machine say nothing about speed.
 */
export const QUICK = process.env['BB_BENCH_QUICK'] === '1';

/**
 * How many rounds (or items) a benchmark runs: `BB_BENCH_ROUNDS` when set, else
 * `full`, or `quick` in quick mode.
 */
export function benchRounds(full: number, quick = 1): number {
  const set = process.env['BB_BENCH_ROUNDS'];
  if (set !== undefined && /^[1-9]\d*$/.test(set)) return Number(set);
  return QUICK ? quick : full;
}

/** A benchmark's size (items per round, files in a repository): `full`, or `quick` in quick mode. */
export function benchSize(full: number, quick: number): number {
  return QUICK ? quick : full;
}

/** The middle of `xs` (the upper one of an even count); `xs` is not changed. */
export const median = (xs: number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** The 95th percentile of `xs` (nearest rank); `xs` is not changed. */
export const p95 = (xs: number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.ceil(xs.length * 0.95) - 1]!;

/** Wait until `path` exists: the socket a process under test is about to listen on. */
export async function waitForPath(path: string, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!existsSync(path)) {
    if (Date.now() > end) throw new Error(`${path} did not appear within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Run `code` in another node process that listens on the Unix socket `socket`
 * (a floor to measure against, such as an echo server or a blind relay); resolves
 * once the socket is there.
 */
export async function spawnNodeOn(socket: string, code: string): Promise<ChildProcess> {
  const child = killOnExit(spawn(process.execPath, ['-e', code], { stdio: 'ignore' }));
  await waitForPath(socket);
  return child;
}

/**
 * End `child` when this process exits, however it exits (a benchmark that
 * throws must not leave its servers and relays running to skew the next one).
 */
export function killOnExit<T extends ChildProcess>(child: T): T {
  const kill = () => child.kill('SIGKILL');
  process.once('exit', kill);
  child.once('exit', () => process.off('exit', kill));
  return child;
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Write one result file and print it as a table row.
 * `higherIsBetter` decides how `ratio` is read against `goal`.
 */
export function reportBench(input: {
  name: string;
  metric: string;
  ours: number;
  baseline: number;
  goal: number;
  higherIsBetter: boolean;
  extra?: Record<string, number | string>;
  /** For goals that are not a ratio (e.g. "+50 µs"): the target text and the verdict. */
  target?: string;
  pass?: boolean;
}): BenchResult {
  const ratio = input.ours / input.baseline;
  const pass = input.pass ?? (input.higherIsBetter ? ratio >= input.goal : ratio <= input.goal);
  const result: BenchResult = {
    name: input.name,
    metric: input.metric,
    ours: round(input.ours),
    baseline: round(input.baseline),
    ratio: round(ratio),
    target: input.target ?? `${input.higherIsBetter ? '>=' : '<='} ${input.goal}`,
    pass,
    ...(input.extra ? { extra: input.extra } : {}),
    ...(QUICK ? { quick: true as const } : {}),
  };
  const file = join(root, 'bench', 'results', `${input.name}.json`);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  printTable([result]);
  // A missed goal fails the benchmark's run (and so `pnpm bench`), once the table is out;
  // not in quick mode, whose few rounds judge nothing.
  if (!pass && !QUICK) process.exitCode = 1;
  return result;
}

export function printTable(rows: BenchResult[]): void {
  const head = ['name', 'metric', 'ours', 'baseline', 'ratio', 'target', 'pass'];
  const body = rows.map((r) => [
    r.name,
    r.metric,
    String(r.ours),
    String(r.baseline),
    String(r.ratio),
    r.target,
    r.pass ? 'yes' : 'NO',
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => (b[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ');
  console.log(line(head));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const b of body) console.log(line(b));
}

function round(n: number): number {
  return Math.round(n * 1000) / 1000;
}
