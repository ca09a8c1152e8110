import { type ParseArgsConfig, parseArgs } from 'node:util';
import { BbError } from '@bb/errors';
import { backendKinds } from '@bb/headless';

/** Exit codes of `bb`. */
export const EXIT = {
  OK: 0,
  FAILURE: 1,
  USAGE: 2,
} as const;

/** Where a command reads its environment and writes its output. */
export interface CliIo {
  env: Record<string, string | undefined>;
  cwd: string;
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** Whether stderr is a terminal (progress is shown only then). @default false */
  isTTY?: boolean;
  /** Resolves when the user asks to stop (Ctrl-C); long-running commands return then. */
  interrupted?: Promise<void>;
}

/** A usage error: `bb` prints the message and the command's usage, and exits 2. */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/** `--help` was given: `bb` prints the command's usage on stdout and exits 0. */
export class HelpShown extends Error {
  constructor(readonly usage: string) {
    super('help');
    this.name = 'HelpShown';
  }
}

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * Parse a command's arguments; any problem is a `UsageError` carrying `usage`.
 * `--help` (`-h`) ends the command with its usage (`HelpShown`). With
 * `positionals`, more than that many arguments is a usage error.
 */
export function parse<O extends Options>(
  argv: string[],
  options: O,
  usage: string,
  o: { positionals?: number } = {},
): { values: Record<string, string | boolean | string[] | undefined>; positionals: string[] } {
  let r: { values: Record<string, string | boolean | string[] | undefined>; positionals: string[] };
  try {
    r = parseArgs({
      args: argv,
      options: { help: { type: 'boolean', short: 'h' }, ...options },
      allowPositionals: true,
      strict: true,
    }) as typeof r;
  } catch (err) {
    throw new UsageError((err as Error).message, usage);
  }
  if (r.values['help']) throw new HelpShown(usage);
  if (o.positionals !== undefined && r.positionals.length > o.positionals)
    throw new UsageError(
      `unexpected argument ${JSON.stringify(r.positionals[o.positionals])}`,
      usage,
    );
  return r;
}

/** Whether colour may be used: a terminal, and `NO_COLOR` unset or empty. */
export function useColor(io: CliIo): boolean {
  return !!io.isTTY && !io.env['NO_COLOR'];
}

const paint = (code: number) => (io: CliIo, text: string) =>
  useColor(io) ? `\x1b[${code}m${text}\x1b[0m` : text;
export const bold = paint(1);
export const dim = paint(2);
export const green = paint(32);
export const red = paint(31);
export const yellow = paint(33);

/**
 * Progress for long steps (image checks, launch, waiting for the agent): shown
 * on a terminal, silent when stderr is piped or redirected.
 */
export function progress(io: CliIo): (message: string) => void {
  if (!io.isTTY) return () => {};
  const start = Date.now();
  return (message) =>
    io.stderr(dim(io, `[${((Date.now() - start) / 1000).toFixed(1).padStart(5)} s] ${message}\n`));
}

/** A required string option, or a usage error naming it. */
export function need(
  values: Record<string, unknown>,
  name: string,
  usage: string,
  what = `--${name}`,
): string {
  const v = values[name];
  if (typeof v !== 'string' || v.length === 0) throw new UsageError(`${what} is required`, usage);
  return v;
}

/**
 * A registered container backend's name (`docker` when none is given), or a usage
 * error. A platform that runs whole bottles (kubernetes) runs them for the
 * orchestrator service only (`BB_BACKEND` of `bb orchestrate serve`).
 */
export function backendName(v: unknown, usage: string): string {
  if (v === undefined) return 'docker';
  const names = backendKinds.names().filter((n) => backendKinds.makesContainers(n));
  if (typeof v === 'string' && names.includes(v)) return v;
  const service = typeof v === 'string' && backendKinds.names().includes(v);
  throw new UsageError(
    `--backend must be one of ${names.join(', ')} (got ${JSON.stringify(v)}${service ? ', which runs bottles for bb orchestrate serve only' : ''})`,
    usage,
  );
}

/** Read a required environment variable, or fail naming it and what it is for. */
export function needEnv(io: CliIo, name: string, what: string): string {
  const v = io.env[name];
  if (!v) throw new BbError('INVALID_INPUT', `${name} is not set: ${what}`);
  return v;
}
