// One replica of the fleet-throughput bench, in a process of its own: the orchestrator
// endpoint on PostgreSQL state (real server), with leases, renewals, take-over scans and
// inbox polls running, as `bb orchestrate serve` has them. Prints its port; on a line
// `stats` on stdin, prints what it asked of the database since it started (statements,
// rows they returned) and how many events it handled.
import { createInterface } from 'node:readline';
import { openPostgresState, PostgresDatabase } from '@bb/state-postgres';
import { listen, SECRET, signedJsonServer } from './load';
import { benchOrchestrator, orchestratorEndpoint } from './orchestrator';
import { acceptStatement } from './pg-floor';

const [url, schema, holder, home] = process.argv.slice(2) as [string, string, string, string];

// Every statement any store sends, and the rows it returned: one count for the replica.
let statements = 0;
let rows = 0;
// BB_BENCH_DEBUG_SQL=1: each statement's count and rows, printed to stderr with the stats.
const sqlCounts = new Map<string, { n: number; rows: number }>();
const bySql = (text: string, n: number) => {
  if (!process.env['BB_BENCH_DEBUG_SQL']) return;
  const k = text.replace(/\s+/g, ' ').slice(0, 90);
  const c = sqlCounts.get(k) ?? { n: 0, rows: 0 };
  c.n++;
  c.rows += n;
  sqlCounts.set(k, c);
};
const query = PostgresDatabase.prototype.query;
PostgresDatabase.prototype.query = async function (this: PostgresDatabase, ...args) {
  const r = await query.apply(this, args as Parameters<typeof query>);
  statements++;
  rows += r.rows.length;
  bySql(String(args[1]), r.rows.length);
  return r;
} as typeof query;
const transaction = PostgresDatabase.prototype.transaction;
PostgresDatabase.prototype.transaction = function (this: PostgresDatabase, action, fn) {
  return transaction.call(this, action, (client) => {
    const q = client.query.bind(client);
    // biome-ignore lint/suspicious/noExplicitAny: pg's query has many overloads; counted as is
    (client as any).query = async (...a: any[]) => {
      const r = await (q as (...x: unknown[]) => Promise<{ rows?: unknown[] }>)(...a);
      statements++;
      rows += r?.rows?.length ?? 0;
      bySql(String(typeof a[0] === 'string' ? a[0] : a[0]?.text), r?.rows?.length ?? 0);
      return r;
    };
    return fn(client);
  });
} as typeof transaction;

const state = await openPostgresState({ url, schema, max: 10 });
if (holder.startsWith('floor')) {
  // The floor: the least endpoint doing this design's write (the signature checked, the
  // body parsed, the ledger entry and the event stored by the store's own statement,
  // its notice included), and nothing else: no orchestrator behind it.
  let written = 0;
  const floor = signedJsonServer((body) => {
    written++;
    return state.database.pool.query(
      acceptStatement(body, { issue: `acme/widgets#${body.issue.number}` }),
    );
  });
  process.stdout.write(`${JSON.stringify({ port: await listen(floor) })}\n`);
  for await (const line of createInterface({ input: process.stdin })) {
    if (line === 'stats')
      process.stdout.write(`${JSON.stringify({ statements: 0, rows: 0, handled: written })}\n`);
    if (line === 'quit') break;
  }
  process.exit(0);
}
let handled = 0;
const { orch } = benchOrchestrator(state.store, state.runs, home, {
  fleet: { leases: state.leases, holder, unleased: state.store },
  log: (e) => {
    if (e['msg'] === 'event handled') handled++;
    if (process.env['BB_BENCH_DEBUG']) process.stderr.write(`${JSON.stringify(e)}\n`);
  },
});
orch.startWatchdog();
const { server } = orchestratorEndpoint(orch, SECRET);
const port = await listen(server);
process.stdout.write(`${JSON.stringify({ port })}\n`);
for await (const line of createInterface({ input: process.stdin })) {
  if (line === 'stats') {
    process.stdout.write(`${JSON.stringify({ statements, rows, handled })}\n`);
    if (sqlCounts.size > 0)
      process.stderr.write(
        `${holder}: ${JSON.stringify(
          [...sqlCounts].sort((x, y) => y[1].n - x[1].n),
          null,
          1,
        )}\n`,
      );
    sqlCounts.clear();
  }
  if (line === 'quit') break;
}
orch.close();
server.close();
await state.close();
process.exit(0);
