import { join } from 'node:path';
import { type Backend, DockerBackend, LocalBackend } from '@bb/headless';
import { GitleaksScanner, loadOrCreateSigningKey, ProvenanceStore } from '@bb/provenance';
import { BbDatabase, resolveBbHome, SqliteForgeStateStore } from '@bb/state';
import type { CliIo } from './io';
import { yellow } from './io';

/** What commands are built from; tests inject their own. */
export interface CliDeps {
  backend?: (name: 'docker' | 'local') => Backend;
}

export function makeBackend(io: CliIo, name: 'docker' | 'local', deps: CliDeps): Backend {
  if (deps.backend) return deps.backend(name);
  if (name === 'local')
    return new LocalBackend({
      warn: (m) => io.stderr(`${yellow(io, m.replace(/^\[bb\] WARNING: /, 'warning: '))}\n`),
    });
  return new DockerBackend();
}

/** The bot-bottle database of `$BB_HOME` with its stores. Close it when done. */
export function openState(io: CliIo) {
  const home = resolveBbHome(io.env);
  const database = BbDatabase.open({ path: join(home, 'bot-bottle.db') });
  return {
    home,
    database,
    store: new SqliteForgeStateStore({ database }),
    provenance: new ProvenanceStore(database),
    key: () => loadOrCreateSigningKey(home),
    scanner: () => new GitleaksScanner(),
    close: () => database.close(),
  };
}
