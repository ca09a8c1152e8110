import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BbError } from '@bb/errors';
import { forgeKinds } from '@bb/forge';
import { COMMAND_NOT_FOUND_HINT } from '@bb/supervise';
import { bbHome } from '../home';
import { HINTS_FILE } from './plan';

/** Copy the runtime files (the gate, bb-forge, the MCP bridges, the script agent, …) where bottles can read them. */
export function prepareRuntime(env: Record<string, string | undefined>): string {
  const require = createRequire(import.meta.url);
  const sidecarDir = join(
    dirname(require.resolve('@bb/forge-sidecar/package.json')),
    'dist',
    'bundle',
  );
  const egressDir = join(dirname(require.resolve('@bb/egress/package.json')), 'dist', 'bundle');
  const superviseDir = join(
    dirname(require.resolve('@bb/supervise/package.json')),
    'dist',
    'bundle',
  );
  const here = dirname(fileURLToPath(import.meta.url));
  // From this package's dist/ or src/, or through its name when an application has
  // bundled this code into its own files.
  let byName = '';
  try {
    byName = join(dirname(require.resolve('@bb/headless/package.json')), 'dist', 'bundle');
  } catch {}
  const own = [join(here, 'bundle'), join(here, '..', '..', 'dist', 'bundle'), byName].find(
    (d) =>
      d &&
      existsSync(join(d, 'script-agent.mjs')) &&
      existsSync(join(d, 'bb-gate.mjs')) &&
      existsSync(join(d, 'bb-waiter.mjs')),
  );
  const files: Array<[string, string]> = [
    [sidecarDir, 'sidecar.mjs'],
    [sidecarDir, 'bb-forge.mjs'],
    [sidecarDir, 'bb-forge-mcp.mjs'],
    [egressDir, 'bb-egress.mjs'],
    [egressDir, 'bb-bridge.mjs'],
    [superviseDir, 'supervise-sidecar.mjs'],
    [superviseDir, 'bb-supervise.mjs'],
    [superviseDir, 'bb-supervise-mcp.mjs'],
    [own ?? '', 'script-agent.mjs'],
    [own ?? '', 'bb-gate.mjs'],
    [own ?? '', 'bb-waiter.mjs'],
  ];
  for (const [dir, f] of files) {
    if (!dir || !existsSync(join(dir, f))) {
      throw new BbError(
        'NOT_FOUND',
        `the bottle runtime file ${f} is missing: build the packages (pnpm build) first`,
      );
    }
  }
  const target = join(bbHome(env), 'runtime');
  mkdirSync(target, { recursive: true, mode: 0o755 });
  chmodSync(target, 0o755);
  // Copied once per build, not once per turn; written aside and renamed, so a bottle
  // starting meanwhile never reads half a file.
  for (const [dir, f] of files) copyIfChanged(join(dir, f), join(target, f));
  // Read by bash in a supervised bottle (BASH_ENV): what a missing command means there.
  writeIfChanged(join(target, HINTS_FILE), COMMAND_NOT_FOUND_HINT);
  // Optional: where no C compiler built them, bb-bridge carries its ports itself and
  // the gate's egress proxy its tunnels.
  for (const program of ['bb-relay', 'bb-tunnel']) {
    const built = join(egressDir, program);
    if (existsSync(built)) copyIfChanged(built, join(target, program));
    else rmSync(join(target, program), { force: true });
  }
  return target;
}

/**
 * A forge kind not built in reaches a bottle's gate as its bundled module,
 * copied into the runtime directory (read-only in the gate):
 * `{ FORGE_KIND_MODULE }` as the gate sees it, or nothing for a built-in kind.
 */
export function kindModule(
  runtime: string,
  inGate: string,
  kindName: string,
): Record<string, string> {
  const from = forgeKinds.get(kindName).sidecarModule;
  if (!from) return {};
  if (!existsSync(from))
    throw new BbError(
      'NOT_FOUND',
      `the ${kindName} forge kind's sidecar module ${from} is missing: build it (one bundled ES module)`,
    );
  const file = `forge-kind-${kindName}.mjs`;
  copyIfChanged(from, join(runtime, file));
  return { FORGE_KIND_MODULE: `${inGate}/${file}` };
}

/** Write `text` to `to` unless it holds it already, never leaving half a file. */
function writeIfChanged(to: string, text: string): void {
  try {
    if (readFileSync(to, 'utf8') === text) {
      // Readable by the agent whatever the umask it was written under.
      chmodSync(to, 0o644);
      return;
    }
  } catch {}
  const part = `${to}.${randomBytes(4).toString('hex')}.part`;
  writeFileSync(part, text);
  chmodSync(part, 0o644);
  renameSync(part, to);
}

/** Copy `from` to `to` unless it is there already (same size and time), never leaving half a file. */
function copyIfChanged(from: string, to: string): void {
  const src = statSync(from);
  const dst = existsSync(to) ? statSync(to) : undefined;
  // The copy's time is the source's to about the millisecond (utimes goes through a
  // Date and a double), never to the nanosecond: compared exactly, every call copied.
  if (dst && dst.size === src.size && Math.abs(dst.mtimeMs - src.mtimeMs) < 1) return;
  const part = join(
    dirname(to),
    `.${basename(to)}.${process.pid}.${randomBytes(4).toString('hex')}`,
  );
  copyFileSync(from, part);
  chmodSync(part, 0o755);
  utimesSync(part, src.atime, src.mtime);
  renameSync(part, to);
}
