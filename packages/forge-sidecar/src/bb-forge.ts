import { readFileSync } from 'node:fs';
import { errorMessage, isBbError } from '@bb/errors';
import { ForgeSidecarClient } from './client';
import { METHOD_NAMES, METHODS, type MethodName, type ParamsOf } from './contract';

const USAGE = `usage: bb-forge <command> [args]

Talk to the forge through this bottle's sidecar ($BB_SIDECAR_SOCKET, default /run/bb/forge.sock).

${METHOD_NAMES.map((m) => {
  const { command, args, help } = METHODS[m].cli;
  return `  ${`${command} ${args}`.trim().padEnd(24)}  ${help}`;
}).join('\n')}

Exit codes: 0 ok, 1 refused or failed (the reason is printed), 2 usage.
`;

function text(arg: string | undefined, readStdin: () => string): string | undefined {
  return arg === '-' ? readStdin() : arg;
}

function num(arg: string | undefined): number | undefined {
  return arg !== undefined && /^[1-9]\d*$/.test(arg) ? Number(arg) : undefined;
}

type Parsed<M extends MethodName> = ParamsOf<M> | { usage: string };
type Text = () => string;

/** Each method's arguments as `bb-forge` takes them (a usage error names what is wrong). */
const ARGV: {
  [M in MethodName]: (a: string | undefined, b: string | undefined, stdin: Text) => Parsed<M>;
} = {
  read_issue: (a) => numbered('read-issue', a),
  read_pr: (a) => numbered('read-pr', a),
  read_comments: (a) => numbered('comments', a),
  read_reviews: (a) => numbered('reviews', a),
  post_comment: (a, b, stdin) => withText('comment', a, b, stdin),
  update_description: (a, b, stdin) => withText('describe', a, b, stdin),
  open_pr: (a, b, stdin) =>
    a ? { title: a, body: text(b, stdin) ?? '' } : { usage: 'open-pr needs a title' },
  push: () => ({}),
  signal_done: (a, b) =>
    a !== 'success' && a !== 'failure' && a !== 'blocked'
      ? {
          usage: `done needs a status of success, failure or blocked, got ${JSON.stringify(a ?? '')}`,
        }
      : b
        ? { status: a, summary: b }
        : { usage: 'done needs a summary' },
};

function numbered(cmd: string, a: string | undefined): Parsed<'read_issue'> {
  const n = num(a);
  return n === undefined
    ? { usage: `${cmd} needs an issue or PR number, got ${JSON.stringify(a ?? '')}` }
    : { number: n };
}

function withText(
  cmd: string,
  a: string | undefined,
  b: string | undefined,
  stdin: Text,
): Parsed<'post_comment'> {
  const n = num(a);
  const body = text(b, stdin);
  return n === undefined || body === undefined
    ? { usage: `${cmd} needs a number and a text (or - for stdin)` }
    : { number: n, body };
}

/** Run bb-forge with `argv`; returns the exit code. */
export async function runBbForge(
  argv: string[],
  io: {
    out: (s: string) => void;
    err: (s: string) => void;
    stdin?: () => string;
    client?: ForgeSidecarClient;
  },
): Promise<number> {
  const [cmd, a, b] = argv;
  const readStdin = io.stdin ?? (() => readFileSync(0, 'utf8'));
  const usage = (why: string) => {
    io.err(`bb-forge: ${why}\n\n${USAGE}`);
    return 2;
  };
  if (!cmd || cmd === '-h' || cmd === '--help' || cmd === 'help') {
    io.out(USAGE);
    return cmd ? 0 : 2;
  }
  const method = METHOD_NAMES.find((m) => METHODS[m].cli.command === cmd);
  if (!method) return usage(`unknown command ${JSON.stringify(cmd)}`);
  const params = ARGV[method](a, b, readStdin);
  if ('usage' in params) return usage(params.usage);
  const client = io.client ?? new ForgeSidecarClient();
  try {
    io.out(`${JSON.stringify(await client.call(method as string, params), null, 2)}\n`);
    return 0;
  } catch (err) {
    io.err(`bb-forge: ${isBbError(err) ? `${err.code}: ` : ''}${errorMessage(err)}\n`);
    return 1;
  } finally {
    if (!io.client) await client.close();
  }
}
