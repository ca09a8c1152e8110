/**
 * The waiter: what a warm-capable agent container runs instead of its agent.
 * It runs one turn's command per file the host leaves in a directory the
 * bottle can only read (`<turn>.json`: argv, environment, working directory),
 * in order, and after each turn's command exits it kills whatever the turn left
 * running and says the turn ended (`<turn>.exit` in a directory of the agent's,
 * holding the exit code). Between turns it does nothing; the host pauses the
 * container, and resumes it for the next turn instead of making a new one.
 *
 * It runs as the agent, so the agent can forge or block what it says: the host
 * trusts nothing from it but what it would trust from the agent's own exit, and
 * checks from outside (the engine's process list) that a turn left nothing.
 * With the proxies, it also serves the in-bottle bridge for every turn.
 */
import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { type BridgeMapping, type RunningBridge, startBridge } from '@bb/egress/bridge';
import { untilFile } from './until-file';

/** One turn's command, as the host writes it. */
export interface TurnCommand {
  argv: string[];
  env: Record<string, string>;
  cwd?: string;
  /** The turn's nonce, in the name of the file that says it ended. */
  nonce: string;
}

/** A turn's command read from its file, or why it is not one. */
export function parseTurnCommand(text: string): TurnCommand {
  const v = JSON.parse(text) as Partial<TurnCommand>;
  const strings = (a: unknown): a is string[] =>
    Array.isArray(a) && a.every((x) => typeof x === 'string');
  if (!strings(v.argv) || v.argv.length === 0) throw new Error('argv must be a list of strings');
  if (
    typeof v.env !== 'object' ||
    v.env === null ||
    !Object.values(v.env).every((x) => typeof x === 'string')
  )
    throw new Error('env must map names to strings');
  if (v.cwd !== undefined && typeof v.cwd !== 'string') throw new Error('cwd must be a string');
  if (typeof v.nonce !== 'string' || !/^[0-9a-f]{8,64}$/.test(v.nonce))
    throw new Error('nonce must be hex');
  return {
    argv: v.argv,
    env: v.env,
    nonce: v.nonce,
    ...(v.cwd !== undefined ? { cwd: v.cwd } : {}),
  };
}

/** The waiter's own variables: none of them reaches a turn. */
const WAITER_VARS = new Set([
  'BB_TURN_COMMANDS',
  'BB_TURN_STATUS',
  'BB_FIRST_TURN',
  'BB_AFTER_TURN',
  'BB_AFTER_CODE',
  'BB_TURN_ENV',
  'BB_TURN_NONCE',
  'BB_BRIDGE',
  'BB_WAITER_KILL_ALL',
]);

/** The file of turn `n`'s command in the commands directory. */
export const turnCommandFile = (n: number) => `${n}.json`;
/**
 * The file saying turn `n` ended (its exit code), in the status directory. Its
 * name holds the turn's nonce, which the host chooses when the turn starts: a
 * word written ahead of time for a later turn is no word of it.
 */
export const turnEndFile = (n: number, nonce: string) => `${n}-${nonce}.exit`;

export interface WaiterOptions {
  /** Where the host leaves each turn's command (the bottle reads it only). */
  commands: string;
  /** Where the waiter says a turn ended. */
  status: string;
  firstTurn: number;
  /**
   * The turn the container's own command just ran (the waiter is started after
   * it, by `turnThenWaitScript`) and its exit code: ended as any turn is, then
   * the waiter waits for the next.
   */
  after?: { turn: number; code: number; nonce: string };
  /** Bridge ports to serve (`PORT=SOCKET`), parsed. */
  bridge?: BridgeMapping[];
  /** The `bb-relay` program, to serve the bridge's ports (see `startBridge`). */
  bridgeRelay?: string | undefined;
  /**
   * Kill every process the waiter may signal once a turn's command exits (in a
   * container: all the agent's, the init excepted). Otherwise only the
   * command's process group.
   */
  killAll: boolean;
  log?: (line: string) => void;
}

/** Run turns until told to stop (SIGTERM): never returns otherwise. */
export async function runWaiter(o: WaiterOptions): Promise<never> {
  const log = o.log ?? ((l) => process.stderr.write(`bb-waiter: ${l}\n`));
  let child: ReturnType<typeof spawn> | undefined;
  // A stop: the turn's command is told as it would be without the waiter, and the
  // waiter goes once it has (the container's stop kills what stays).
  const stop = (signal: NodeJS.Signals) => {
    const code = 128 + (signal === 'SIGINT' ? 2 : 15);
    if (!child?.pid) process.exit(code);
    killGroup(child.pid, signal);
    child.once('exit', () => process.exit(code));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  // The bridge serves a turn: started with it and gone with it, so a warm container
  // idles with nothing in it but its init and the waiter.
  let bridges: RunningBridge[] = [];
  const serveBridge = async () => {
    if (o.bridge?.length)
      bridges = await startBridge(o.bridge, { nativeRelay: o.bridgeRelay, onMessage: log });
  };
  const ended = async (n: number, nonce: string, code: number, pid: number | undefined) => {
    for (const b of bridges.splice(0)) b.close();
    // Nothing of a turn outlives it.
    if (o.killAll) {
      try {
        process.kill(-1, 'SIGKILL');
      } catch {}
      await othersGone();
    } else if (pid) killGroup(pid, 'SIGKILL');
    mkdirSync(o.status, { recursive: true });
    const part = join(o.status, `.${turnEndFile(n, nonce)}.part`);
    writeFileSync(part, `${code}\n`);
    renameSync(part, join(o.status, turnEndFile(n, nonce)));
  };
  // The container's own turn ends first: its bridge goes with it.
  if (o.after) await ended(o.after.turn, o.after.nonce, o.after.code, undefined);
  // The image's environment: neither the waiter's variables nor the first turn's own.
  const firstTurns = new Set((process.env['BB_TURN_ENV'] ?? '').split(' '));
  const baseEnv = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !WAITER_VARS.has(k) && !firstTurns.has(k)),
  );
  for (let n = o.firstTurn; ; n++) {
    const command = await nextCommand(o.commands, n, log);
    await serveBridge();
    child = spawn(command.argv[0]!, command.argv.slice(1), {
      // The container's environment (the image's PATH, …) under the turn's own.
      env: { ...baseEnv, ...command.env },
      ...(command.cwd ? { cwd: command.cwd } : {}),
      stdio: ['ignore', 'inherit', 'inherit'],
      detached: true,
    });
    const code = await new Promise<number>((resolve) => {
      child!.once('error', (err) => {
        log(`turn ${n}: ${err.message}`);
        resolve(127);
      });
      child!.once('exit', (c, signal) =>
        resolve(c ?? 128 + (signal === 'SIGKILL' ? 9 : signal === 'SIGTERM' ? 15 : 1)),
      );
    });
    const pid = child.pid;
    child = undefined;
    await ended(n, command.nonce, code, pid);
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {}
}

/** Wait (up to 2 s) until no process but the init and this one is left (the init reaps them). */
async function othersGone(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const others = readdirSync('/proc').filter(
      (d) => /^\d+$/.test(d) && d !== '1' && Number(d) !== process.pid,
    );
    if (others.length === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Wait for turn `n`'s command and read it; a file that is not one is skipped, said on stderr. */
async function nextCommand(
  dir: string,
  n: number,
  log: (line: string) => void,
): Promise<TurnCommand> {
  const file = join(dir, turnCommandFile(n));
  for (;;) {
    if (existsSync(file)) {
      try {
        return parseTurnCommand(readFileSync(file, 'utf8'));
      } catch (err) {
        // The host writes it whole (renamed into place): this is not a torn read.
        log(`turn ${n}'s command cannot be read: ${(err as Error).message}`);
        return { argv: ['sh', '-c', 'exit 70'], env: {}, nonce: 'unreadable' };
      }
    }
    // Told by the kernel when the host renames it into place, or 50 ms on at the latest.
    await untilFile(file, 50);
  }
}

/**
 * The shell lines a warm-capable agent container starts with, after the turn's
 * prelude: the turn's command (`"$@"`) as a child, told of a stop as it would be
 * without them, then, once it exits, the waiter in the shell's place, which ends
 * the turn (`BB_AFTER_TURN`) and waits for the next. A stop ends the container
 * instead. The first turn pays nothing for the waiter: it starts after.
 */
export function turnThenWaitScript(runtimeDir: string): string {
  return [
    '"$@" & bb_child=$!',
    `trap 'bb_stop=1; kill -TERM "$bb_child" 2>/dev/null' TERM INT`,
    'while :; do wait "$bb_child"; bb_code=$?; kill -0 "$bb_child" 2>/dev/null || break; done',
    '[ -n "$bb_stop" ] && exit "$bb_code"',
    'trap - TERM INT',
    `BB_AFTER_CODE=$bb_code exec node ${runtimeDir}/bb-waiter.mjs`,
  ].join('\n');
}
