// The benchmarks' results, kept: every result in bench/results printed as one table,
// a dated line per run appended to bench/history.jsonl (the commit, the machine, each
// figure), and a verdict: non-zero when a goal was missed, or when a result was not
// written by this run (a benchmark that did not run must not pass on an old figure).
//
//   node scripts/bench-table.mjs [--since <epoch ms>] [--dir <bench dir>] [--no-history] [--quick]
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { cpus, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const quiet = (cmd, args) => {
  try {
    return execFileSync(cmd, args, {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return null;
  }
};

/** What the figures were measured on. */
export function machineFacts() {
  return {
    cores: cpus().length,
    memoryBytes: totalmem(),
    kernel: release(),
    node: process.version,
    docker: quiet('docker', ['version', '--format', '{{.Server.Version}}']),
  };
}

/**
 * Read, print and keep one run's results; returns the exit code (0: every result is this
 * run's and met its goal).
 */
export function report({
  dir,
  since,
  history = true,
  quick = false,
  log = console.log,
  warn = console.error,
}) {
  const results = join(dir, 'results');
  const files = existsSync(results) ? readdirSync(results).filter((f) => f.endsWith('.json')) : [];
  const rows = files.map((f) => {
    const r = JSON.parse(readFileSync(join(results, f), 'utf8'));
    const at = statSync(join(results, f)).mtimeMs;
    return { ...r, stale: since !== undefined && at < since, at };
  });
  if (rows.length === 0) {
    warn(`no benchmark results in ${results}`);
    return 1;
  }
  const head = ['name', 'metric', 'ours', 'baseline', 'ratio', 'target', 'pass'];
  const body = rows.map((r) =>
    [
      r.name,
      r.metric,
      r.ours,
      r.baseline,
      r.ratio,
      r.target,
      r.stale ? 'STALE' : r.pass ? 'yes' : 'NO',
    ].map(String),
  );
  const w = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  const fmt = (c) => c.map((x, i) => x.padEnd(w[i])).join('  ');
  log(`\nAll benchmarks (${rows.length}):`);
  log(fmt(head));
  log(w.map((n) => '-'.repeat(n)).join('  '));
  for (const b of body) log(fmt(b));
  const fresh = rows.filter((r) => !r.stale);
  // A quick run's few rounds are no figures to keep.
  if (history && !quick && fresh.length > 0) {
    const line = {
      date: new Date().toISOString(),
      commit: quiet('git', ['rev-parse', 'HEAD']),
      dirty: (quiet('git', ['status', '--porcelain']) ?? '') !== '',
      machine: machineFacts(),
      results: fresh.map(({ stale: _s, at: _a, ...r }) => r),
    };
    appendFileSync(join(dir, 'history.jsonl'), `${JSON.stringify(line)}\n`);
    log(`\nkept in ${join(dir, 'history.jsonl')}`);
  }
  const stale = rows.filter((r) => r.stale).map((r) => r.name);
  // Quick mode judges that each ran and wrote its result, not its goal.
  const missed = quick ? [] : fresh.filter((r) => !r.pass).map((r) => r.name);
  if (stale.length > 0)
    warn(
      `\nnot written by this run (its benchmark failed or is gone; remove an old file from ${results}): ${stale.join(', ')}`,
    );
  if (quick) log('\nquick mode: every result above was written by this run; goals are not judged');
  if (missed.length > 0)
    warn(`\nmissed ${missed.length === 1 ? 'its goal' : 'their goals'}: ${missed.join(', ')}`);
  return stale.length > 0 || missed.length > 0 ? 1 : 0;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const since = arg('--since');
  process.exit(
    report({
      dir: arg('--dir') ?? join(import.meta.dirname, '..', 'bench'),
      since: since === undefined ? undefined : Number(since),
      history: !process.argv.includes('--no-history'),
      quick: process.argv.includes('--quick'),
    }),
  );
}
