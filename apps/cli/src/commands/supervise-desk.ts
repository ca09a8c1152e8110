// What `bb supervise` and its inbox share: the desk they decide at (this BB_HOME's,
// or a remote orchestrator's), requests made printable, ages, and the operator's $EDITOR.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BbError } from '@bb/errors';
import { bottleRemediator, supervisedBottles } from '@bb/headless';
import {
  type DeskPort,
  loadPolicy,
  localDesk,
  RemoteDesk,
  SuperviseDesk,
  type SuperviseRecords,
  SuperviseStore,
} from '@bb/supervise';
import { forTerminalDeep, forTerminal as printable } from '@bb/wall';
import { type CliDeps, makeBackend, openLocal, openState } from '../deps';
import { type CliIo, dim, UsageError } from '../io';
import { SUPERVISE_USAGE } from '../usage';

/** Who decides at this BB_HOME: `--by`, or `BB_OPERATOR`, or the login. */
export const operator = (io: CliIo, by?: unknown): string =>
  (typeof by === 'string' && by) || io.env['BB_OPERATOR'] || io.env['USER'] || 'operator';

/** Where `bb supervise` decides: this BB_HOME (the default), or a remote orchestrator. */
export interface DeskTarget {
  /** `--server` (or `BB_SUPERVISE_SERVER`): the orchestrator's URL. */
  server?: string | undefined;
  /** `--token-file`: the operator token, read from this file instead of `BB_OPERATOR_TOKEN`. */
  tokenFile?: string | undefined;
}

/** The options of `bb supervise` that take a value (see its `parse` calls). */
const TAKES_VALUE = new Set(['--status', '--scope', '--file', '--expect', '--reason', '--by']);

/**
 * `--server URL` and `--token-file F` taken out of a `bb supervise` command line,
 * wherever they stand (`bb supervise --server URL list`), and the rest.
 */
export function takeTarget(
  argv: string[],
  env: CliIo['env'],
): { target: DeskTarget; rest: string[] } {
  const rest: string[] = [];
  const target: DeskTarget = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    // Past `--` everything is an argument as it is.
    if (a === '--') {
      rest.push(...argv.slice(i));
      break;
    }
    const m = /^--(server|token-file)(?:=(.*))?$/.exec(a);
    if (!m) {
      rest.push(a);
      // The value of an option that takes one is that option's, whatever it says
      // (a rejection's reason may read `--server=…`): it never names the server.
      if (TAKES_VALUE.has(a) && i + 1 < argv.length) rest.push(argv[++i]!);
      continue;
    }
    const v = m[2] ?? argv[++i];
    if (v === undefined || v === '' || v.startsWith('--'))
      throw new UsageError(`--${m[1]} needs a value`, SUPERVISE_USAGE);
    if (m[1] === 'server') target.server = v;
    else target.tokenFile = v;
  }
  target.server ??= env['BB_SUPERVISE_SERVER'] || undefined;
  if (target.tokenFile && !target.server)
    throw new UsageError(
      '--token-file is for a remote orchestrator: give --server URL too',
      SUPERVISE_USAGE,
    );
  return { target, rest };
}

/**
 * The desk `bb supervise` decides at: a remote orchestrator's (`--server`), as the
 * operator its token names, or this BB_HOME's, as `by` through `via` (the
 * command or the inbox). Close it when done.
 */
export function openPort(
  io: CliIo,
  deps: CliDeps,
  o: {
    target: DeskTarget;
    by: string;
    via: 'cli' | 'tui';
    /** An image build's lines (the agent's words; printable already). @default stderr on a terminal */
    onProgress?: (line: string) => void;
  },
): { port: DeskPort; remote: boolean; close: () => void } {
  if (o.target.server) {
    let token = io.env['BB_OPERATOR_TOKEN'];
    if (o.target.tokenFile) {
      try {
        token = readFileSync(resolve(io.cwd, o.target.tokenFile), 'utf8').trim();
      } catch (err) {
        throw new BbError(
          'INVALID_INPUT',
          `cannot read the operator token from ${o.target.tokenFile}: ${(err as Error).message}`,
        );
      }
    }
    return {
      port: new RemoteDesk({ url: o.target.server, token }),
      remote: true,
      close: () => {},
    };
  }
  const who = { by: o.by, via: o.via };
  if (!io.env['BB_DATABASE_URL']) {
    const { desk, close } = openDesk(io, deps, o.onProgress);
    return { port: localDesk(desk, who), remote: false, close };
  }
  // The fleet's requests, in its PostgreSQL: connected on first use.
  const ready = openState(io).then((state) => ({
    state,
    port: localDesk(deskOver(io, deps, state.home, state.supervise, o.onProgress), who),
  }));
  const lazy = <K extends keyof DeskPort>(k: K) =>
    (async (...args: unknown[]) =>
      ((await ready).port[k] as (...a: unknown[]) => unknown)(...args)) as unknown as DeskPort[K];
  const port: DeskPort = {
    where: 'the fleet (BB_DATABASE_URL)',
    list: lazy('list'),
    show: lazy('show'),
    approve: lazy('approve'),
    reject: lazy('reject'),
    cancel: lazy('cancel'),
    current: lazy('current'),
    edit: lazy('edit'),
  };
  return {
    port,
    remote: false,
    close: () => {
      ready.then(
        (r) => r.state.close(),
        () => {},
      );
    },
  };
}

/** A desk over `store` and this BB_HOME's bottles, applying decisions with Docker. */
function deskOver(
  io: CliIo,
  deps: CliDeps,
  home: string,
  store: SuperviseRecords,
  onProgress?: (line: string) => void,
): SuperviseDesk {
  return new SuperviseDesk({
    store,
    bottles: supervisedBottles(io.env),
    policy: loadPolicy(home),
    remediator: bottleRemediator({
      backend: makeBackend(io, 'docker', deps),
      env: io.env,
      // A build's lines are the agent's words: shown printable, never interpreted.
      onProgress: (l) =>
        onProgress ? onProgress(printable(l)) : io.isTTY && io.stderr(dim(io, `${printable(l)}\n`)),
    }),
  });
}

/** The desk over this BB_HOME's SQLite database and bottles; close the state when done. */
export function openDesk(io: CliIo, deps: CliDeps, onProgress?: (line: string) => void) {
  const state = openLocal(io);
  const desk = deskOver(io, deps, state.home, new SuperviseStore(state.database), onProgress);
  return { desk, state, close: () => state.close() };
}

/**
 * A request with every string made printable: the agent wrote most of them, and
 * an escape sequence in a justification must not redraw what the operator sees.
 */
export function safeView<T>(v: T): T {
  return forTerminalDeep(v);
}

/** How long ago `iso` was, in a few characters (`42s`, `7m`, `3h`). */
export function age(iso: string, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  return s < 90 ? `${s}s` : s < 5400 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`;
}

/**
 * `text` as the file `name`, opened in the operator's $VISUAL or $EDITOR (in a
 * directory of its own, removed after); what the file holds when the editor
 * exits. `undefined` when no editor is set.
 */
export function editInEditor(
  io: CliIo,
  name: string,
  text: string,
): { editor: string; status: number | null; text: string } | undefined {
  const editor = io.env['VISUAL'] || io.env['EDITOR'];
  if (!editor) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'bb-edit-'));
  const f = join(dir, name);
  try {
    writeFileSync(f, text);
    const r = spawnSync('sh', ['-c', `${editor} "$1"`, 'sh', f], {
      stdio: 'inherit',
      env: io.env as NodeJS.ProcessEnv,
    });
    return { editor, status: r.status, text: existsSync(f) ? readFileSync(f, 'utf8') : text };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
