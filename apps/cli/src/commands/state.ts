import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { BbError, registerUrlSecrets } from '@bb/errors';
import { ProvenanceStore } from '@bb/provenance';
import { BbDatabase, resolveBbHome, SqliteForgeStateStore, SqliteLeaseStore } from '@bb/state';
import { type CliIo, green, parse, UsageError } from '../io';
import { STATE_USAGE } from '../usage';

/** `bb state migrate --to postgres://…`: copy the SQLite state into PostgreSQL. */
export async function stateCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '-h' || sub === '--help' || sub === 'help') {
    io.stdout(STATE_USAGE);
    return sub === undefined ? 2 : 0;
  }
  if (sub !== 'migrate')
    throw new UsageError(
      `no state command ${JSON.stringify(sub)}; try bb state migrate`,
      STATE_USAGE,
    );
  const { values } = parse(
    rest,
    { to: { type: 'string' }, from: { type: 'string' }, json: { type: 'boolean' } },
    STATE_USAGE,
    { positionals: 0 },
  );
  // From the environment by preference: a URL with a password in argv is visible to every
  // process on the machine.
  const to = typeof values['to'] === 'string' ? values['to'] : io.env['BB_DATABASE_URL'];
  if (!to)
    throw new UsageError(
      'name the PostgreSQL database: set BB_DATABASE_URL (or pass --to postgres://…)',
      STATE_USAGE,
    );
  registerUrlSecrets(to);
  const from =
    typeof values['from'] === 'string'
      ? resolve(io.cwd, values['from'])
      : join(resolveBbHome(io.env), 'bot-bottle.db');
  if (!existsSync(from))
    throw new BbError(
      'NOT_FOUND',
      `no SQLite state at ${from}: name it with --from, or set BB_HOME to the install's directory`,
    );
  const { copySqliteToPostgres, openPostgresState } = await import('@bb/state-postgres');
  const source = BbDatabase.open({ path: from });
  try {
    // At the schema this bb writes (as any bb command would bring it), so the columns match.
    new SqliteForgeStateStore({ database: source });
    new ProvenanceStore(source);
    // An orchestrator still working on this file would write after the copy.
    const working = new SqliteLeaseStore(source)
      .leases()
      .filter((l) => l.name.startsWith('issue:'));
    if (working.length > 0)
      throw new BbError(
        'CONFLICT',
        `an orchestrator (${[...new Set(working.map((l) => l.holder))].join(', ')}) is working on ${from}: stop it first, then migrate (nothing was copied)`,
      );
    const target = await openPostgresState({ url: to });
    try {
      if (!values['json']) io.stderr(`copying ${from} into ${target.database.where}\n`);
      const copied = await copySqliteToPostgres({
        from: source,
        to: target,
        progress: (t) => {
          if (!values['json']) io.stderr(`  ${t.table}: ${t.rows} rows\n`);
        },
      });
      if (values['json']) {
        io.stdout(`${JSON.stringify({ from, to: target.database.where, copied }, null, 2)}\n`);
      } else {
        io.stdout(
          `${green(io, 'copied')} ${copied.reduce((n, t) => n + t.rows, 0)} rows into ${target.database.where}.\n` +
            'Next: stop using the SQLite file; set BB_DATABASE_URL to that URL for every orchestrator and start them.\n',
        );
      }
      return 0;
    } finally {
      await target.close();
    }
  } finally {
    source.close();
  }
}
