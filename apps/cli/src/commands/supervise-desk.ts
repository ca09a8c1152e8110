// What `bb supervise` and its inbox share: the desk over this BB_HOME, requests
// made printable, ages, and the operator's $EDITOR.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bottleRemediator, supervisedBottles } from '@bb/headless';
import { loadPolicy, SuperviseDesk, SuperviseStore } from '@bb/supervise';
import { forTerminalDeep, forTerminal as printable } from '@bb/wall';
import { type CliDeps, makeBackend, openLocal } from '../deps';
import { type CliIo, dim } from '../io';

/** The desk over this BB_HOME's database and bottles; close the state when done. */
export function openDesk(io: CliIo, deps: CliDeps) {
  const state = openLocal(io);
  const backend = makeBackend(io, 'docker', deps);
  const desk = new SuperviseDesk({
    store: new SuperviseStore(state.database),
    bottles: supervisedBottles(io.env),
    policy: loadPolicy(state.home),
    remediator: bottleRemediator({
      backend,
      env: io.env,
      // A build's lines are the agent's words: shown printable, never interpreted.
      onProgress: (l) => io.isTTY && io.stderr(dim(io, `${printable(l)}\n`)),
    }),
  });
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
