import { readFileSync } from 'node:fs';
import { errorMessage, isBbError } from '@bb/errors';
import { ForgeSidecarClient } from './client';

const USAGE = `usage: bb-forge <command> [args]

Talk to the forge through this bottle's sidecar ($BB_SIDECAR_SOCKET, default /run/bb/forge.sock).

  read-issue N              print issue N as JSON
  read-pr N                 print PR N as JSON
  comments N                print the comments of issue or PR N
  reviews N                 print the reviews of PR N with their inline comments (file, line)
  comment N TEXT|-          comment on issue or PR N (- reads the text from stdin)
  describe N TEXT|-         replace the description of issue or PR N
  open-pr TITLE [BODY|-]    push your branch and open the PR for your issue
  push                      push new commits to your branch
  done STATUS SUMMARY       signal that you are done (STATUS: success, failure or blocked)

Exit codes: 0 ok, 1 refused or failed (the reason is printed), 2 usage.
`;

function text(arg: string | undefined, readStdin: () => string): string | undefined {
  return arg === '-' ? readStdin() : arg;
}

function num(arg: string | undefined): number | undefined {
  return arg !== undefined && /^[1-9]\d*$/.test(arg) ? Number(arg) : undefined;
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
  const client = io.client ?? new ForgeSidecarClient();
  const print = (v: unknown) => io.out(`${JSON.stringify(v, null, 2)}\n`);
  try {
    switch (cmd) {
      case 'read-issue':
      case 'read-pr':
      case 'reviews':
      case 'comments': {
        const n = num(a);
        if (n === undefined)
          return usage(`${cmd} needs an issue or PR number, got ${JSON.stringify(a ?? '')}`);
        print(
          cmd === 'read-issue'
            ? await client.readIssue(n)
            : cmd === 'read-pr'
              ? await client.readPr(n)
              : cmd === 'reviews'
                ? await client.readReviews(n)
                : await client.readComments(n),
        );
        return 0;
      }
      case 'comment':
      case 'describe': {
        const n = num(a);
        const body = text(b, readStdin);
        if (n === undefined || body === undefined)
          return usage(`${cmd} needs a number and a text (or - for stdin)`);
        print(
          cmd === 'comment'
            ? await client.postComment(n, body)
            : await client.updateDescription(n, body),
        );
        return 0;
      }
      case 'open-pr': {
        if (!a) return usage('open-pr needs a title');
        const body = text(b, readStdin) ?? '';
        print(await client.openPr({ title: a, body }));
        return 0;
      }
      case 'push':
        print(await client.push());
        return 0;
      case 'done': {
        if (a !== 'success' && a !== 'failure' && a !== 'blocked')
          return usage(
            `done needs a status of success, failure or blocked, got ${JSON.stringify(a ?? '')}`,
          );
        if (!b) return usage('done needs a summary');
        print(await client.signalDone(a, b));
        return 0;
      }
      default:
        return usage(`unknown command ${JSON.stringify(cmd)}`);
    }
  } catch (err) {
    io.err(`bb-forge: ${isBbError(err) ? `${err.code}: ` : ''}${errorMessage(err)}\n`);
    return 1;
  } finally {
    if (!io.client) await client.close();
  }
}
