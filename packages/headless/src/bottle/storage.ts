import {
  existsSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { type QueueEvent, QueueReader } from '@bb/forge-sidecar';
import { type BottleMeta, bottlePaths, readMeta } from './layout';

/**
 * What a turn's provenance record is built from, as files this process can
 * read: the op log and egress log (under `dir/state/`), the gate's push
 * repository and the object directories its commits are found in. A storage
 * that keeps bottles elsewhere copies them here first.
 */
export interface TurnEvidence {
  /** Holds `state/ops.jsonl` and `state/egress.jsonl`. */
  dir: string;
  /** The gate's push repository (`refs/bb/imported/<id>` are the commits it took in). */
  pushRepo: string;
  /** Where the commits to scan are: the push repository's objects, then the mirror's. */
  objectDirs: string[];
}

/**
 * Where a bottle's state lives, as the orchestrator reads it: what headless
 * recorded of the bottle, the events its gate queued, its op log, and the
 * orchestrator's own notes on the running turn. The orchestrator never reads a
 * bottle through a host path; a backend whose bottles keep their state
 * elsewhere (a volume on a cluster, an object store) gives its own storage.
 * Every method is asynchronous, so a storage may sit behind a network;
 * `describeBottleStorageConformance` (`@bb/headless/testing`) is what one must do.
 *
 * Everything here is written by the gate or the host, never by the agent; the
 * workspace is not part of it (provenance scans only what the gate took in).
 */
export interface BottleStorage {
  /** What headless recorded of the bottle, or `undefined` when there is none. */
  meta(slug: string): Promise<BottleMeta | undefined>;
  /**
   * Take every event the gate queued, oldest first, each once: `take` runs (and
   * what it records is durable: its promise resolved) before the event is removed.
   */
  drainQueue(slug: string, take: (e: QueueEvent) => void | Promise<void>): Promise<void>;
  /** Whether the gate logged any operation (then the bottle holds evidence to keep). */
  hasOperations(slug: string): Promise<boolean>;
  /** Whether the gate's forge socket is up (its sidecar listens), where the storage can tell. */
  gateListening?(slug: string): Promise<boolean>;
  /** The orchestrator's own note `name` on the bottle (text), or `undefined`. */
  readNote(slug: string, name: string): Promise<string | undefined>;
  /** Write note `name` whole (a crash leaves the old one or the new one). */
  writeNote(slug: string, name: string, text: string): Promise<void>;
  removeNote(slug: string, name: string): Promise<void>;
  /** The files the turn's provenance record is built from. */
  evidence(slug: string): Promise<TurnEvidence>;
}

const NOTE = /^[a-z][a-z0-9-]{0,31}$/;

function noteName(name: string): string {
  if (!NOTE.test(name)) throw new Error(`note name ${JSON.stringify(name)} is not [a-z][a-z0-9-]*`);
  return `${name}.json`;
}

/** The commits the gate took in to push (`refs/bb/imported/<id>` in its repository). */
export function importedCommits(pushRepo: string): string[] {
  const dir = join(pushRepo, 'refs', 'bb', 'imported');
  return existsSync(dir) ? readdirSync(dir).filter((n) => /^[0-9a-f]{40}$/.test(n)) : [];
}

/**
 * Bottles under `$BB_HOME/bottles/<slug>` on this machine's disk: what the
 * Docker and local backends use (their gates write there through bind mounts).
 */
export function hostBottleStorage(env: Record<string, string | undefined>): BottleStorage {
  const paths = (slug: string) => bottlePaths(slug, env);
  return {
    meta: async (slug) => readMeta(slug, env),
    async drainQueue(slug, take) {
      await new QueueReader(paths(slug).queue).drain(take);
    },
    async hasOperations(slug) {
      const ops = join(paths(slug).state, 'ops.jsonl');
      return existsSync(ops) && statSync(ops).size > 0;
    },
    gateListening: async (slug) => existsSync(join(paths(slug).sock, 'forge.sock')),
    async readNote(slug, name) {
      const file = join(paths(slug).dir, noteName(name));
      try {
        return readFileSync(file, 'utf8');
      } catch {
        return undefined;
      }
    },
    async writeNote(slug, name, text) {
      const file = join(paths(slug).dir, noteName(name));
      writeFileSync(`${file}.tmp`, text);
      renameSync(`${file}.tmp`, file);
    },
    async removeNote(slug, name) {
      rmSync(join(paths(slug).dir, noteName(name)), { force: true });
    },
    async evidence(slug) {
      const p = paths(slug);
      const pushRepo = join(p.state, 'push.git');
      const mirror = readMeta(slug, env)?.mirror;
      return {
        dir: p.dir,
        pushRepo,
        objectDirs: [join(pushRepo, 'objects'), ...(mirror ? [join(mirror, 'objects')] : [])],
      };
    },
  };
}
