import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

type Env = Record<string, string | undefined>;

/** `$BB_HOME`, or `~/.bot-bottle` when it is unset or empty, as an absolute path. */
export function bbHome(env: Env = process.env): string {
  const h = env['BB_HOME'];
  return resolve(h && h.length > 0 ? h : join(homedir(), '.bot-bottle'));
}

/** Where everything lives under BB_HOME: the one place these paths are spelled. */
export interface HomeLayout {
  root: string;
  /** The SQLite state (when no BB_DATABASE_URL). */
  database: string;
  /**
   * One directory per bottle: under BB_HOME, or in `BB_BOTTLE_STORE` (a directory
   * every replica reaches, such as NFS) so a bottle outlives its machine.
   */
  bottles: string;
  bottle(slug: string): string;
  /** Whether the bottles are in a shared store (`BB_BOTTLE_STORE`) rather than BB_HOME. */
  shared: boolean;
  /**
   * Where this machine mounts a bottle's disk when the bottles are in a shared
   * store: a mount is one kernel's, so its mount point is too.
   */
  mount(slug: string): string;
  /** Bare mirrors of the repositories bottles clone. */
  mirrors: string;
  mirror(id: string): string;
  /** Marks of launches in progress (a crash before the bottle's directory is made). */
  launching: string;
  launchMark(slug: string): string;
  /** Manifests and operator configuration. */
  config: string;
  agents: string;
  bottleManifests: string;
  /** The operator's supervise ceiling. */
  supervisePolicy: string;
  /** Provenance signing keys. */
  keys: string;
}

/** The layout of `home` (default: `bbHome(env)`). */
export function homeLayout(env: Env = process.env, home = bbHome(env)): HomeLayout {
  const config = join(home, 'config');
  const store = env['BB_BOTTLE_STORE'];
  const bottles = store && store.length > 0 ? resolve(store) : join(home, 'bottles');
  return {
    root: home,
    database: join(home, 'bot-bottle.db'),
    bottles,
    bottle: (slug) => join(bottles, slug),
    shared: bottles !== join(home, 'bottles'),
    mount: (slug) => join(home, 'mounts', slug),
    mirrors: join(home, 'mirrors'),
    mirror: (id) => join(home, 'mirrors', `${id}.git`),
    launching: join(home, 'launching'),
    launchMark: (slug) => join(home, 'launching', slug),
    config,
    agents: join(config, 'agents'),
    bottleManifests: join(config, 'bottles'),
    supervisePolicy: join(config, 'supervise.json'),
    keys: join(home, 'keys'),
  };
}
