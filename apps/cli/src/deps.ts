import { join } from 'node:path';
import { type Backend, backendKinds } from '@bb/headless';
import { GitleaksScanner, loadOrCreateSigningKey } from '@bb/provenance';
import { openState as openOrchestratorState } from '@bb/service';
import { BbDatabase, resolveBbHome } from '@bb/state';
import type { CliIo } from './io';
import { yellow } from './io';

/** What commands are built from; tests inject their own. */
export interface CliDeps {
  backend?: (name: string) => Backend;
}

/** The backend `name` (one registered with `@bb/headless`), its warnings on stderr. */
export function makeBackend(io: CliIo, name: string, deps: CliDeps): Backend {
  if (deps.backend) return deps.backend(name);
  return backendKinds.make(name, {
    env: io.env,
    warn: (m) => io.stderr(`${yellow(io, m.replace(/^\[bb\] WARNING: /, 'warning: '))}\n`),
  });
}

/**
 * The state the orchestrator keeps (`BB_DATABASE_URL`'s PostgreSQL, else the
 * SQLite file of `$BB_HOME`) with its stores. Close it when done.
 */
export async function openState(io: CliIo) {
  const home = resolveBbHome(io.env);
  const state = await openOrchestratorState(io.env['BB_DATABASE_URL'] || undefined, home);
  return {
    home,
    /** Where the state is: the SQLite file, or the database URL without its password. */
    where: state.where,
    /** This machine's SQLite file. */
    database: state.local,
    store: state.store,
    provenance: state.runs,
    leases: state.leases,
    /** Operators' tokens for the API. */
    operators: state.operators,
    /** Supervise requests and decisions. */
    supervise: state.supervise,
    key: () => loadOrCreateSigningKey(home),
    scanner: () => new GitleaksScanner(),
    close: () => state.close(),
  };
}

export type CliState = Awaited<ReturnType<typeof openState>>;

/** Only this machine's SQLite file of `$BB_HOME` (supervise requests name this machine's bottles). */
export function openLocal(io: CliIo) {
  const home = resolveBbHome(io.env);
  const database = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
  return { home, database, close: async () => database.close() };
}
