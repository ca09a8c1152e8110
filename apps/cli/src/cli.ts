import { parseArgs } from 'node:util';
import { errorMessage, isBbError } from '@bb/errors';
import pkg from '../package.json' with { type: 'json' };

const { version } = pkg;

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
}

const HELP = `bb ${version}: let a forge drive AI coding agents in isolated Docker bottles

Usage: bb <command> [options]

Commands:
  help              show this help

Options:
  -h, --help        show this help
  -v, --version     print the version

This build has no agent commands yet. 'bb start', 'bb orchestrate', 'bb provenance',
'bb doctor' and 'bb demo' arrive with the packages they drive; see the README.

Environment:
  BB_HOME           state and configuration directory (default ~/.bot-bottle)
`;

/** Run `bb` with `argv` (without node and script). Returns the exit code. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    });
  } catch (err) {
    io.stderr(`bb: ${errorMessage(err)}\n\n${HELP}`);
    return EXIT.USAGE;
  }
  const [command, ...rest] = parsed.positionals;
  if (parsed.values['version']) {
    io.stdout(`${version}\n`);
    return EXIT.OK;
  }
  if (parsed.values['help'] || command === undefined || command === 'help') {
    io.stdout(HELP);
    return EXIT.OK;
  }
  try {
    io.stderr(
      `bb: unknown command ${JSON.stringify(command)}${rest.length ? ` (with ${rest.length} more arguments)` : ''}\n\n${HELP}`,
    );
    return EXIT.USAGE;
  } catch (err) {
    io.stderr(`bb: ${errorMessage(err)}\n`);
    return isBbError(err, 'INVALID_INPUT') ? EXIT.USAGE : EXIT.FAILURE;
  }
}
