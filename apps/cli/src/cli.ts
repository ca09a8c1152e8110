import { errorMessage, isBbError } from '@bb/errors';
import pkg from '../package.json' with { type: 'json' };
import type { CliDeps } from './deps';
import { type CliIo, EXIT, HelpShown, UsageError } from './io';
import { COMMANDS } from './usage';

export { type CliIo, EXIT } from './io';

const { version } = pkg;

const HELP = `bb ${version}: let a forge drive AI coding agents in isolated Docker bottles

Usage: bb <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(13)} ${c.summary}`).join('\n')}
  help          show this help, or a command's: bb help <command>

Options:
  -h, --help    show this help
  -v, --version print the version

Each command has --help. Usage errors exit 2; failures exit 1; bb start and
bb resume exit with the agent's own code.

Environment:
  BB_HOME        state and configuration directory (default ~/.bot-bottle)
  BB_DATABASE_URL  keep state in this PostgreSQL database instead of BB_HOME's SQLite file
  BB_BASE_IMAGE  the bottle base image (default bb-base:latest)
  DOCKER_HOST    the Docker engine (default the local socket)
  NO_COLOR       turn colour off; progress shows only on a terminal
  BB_DEBUG=1     print stack traces of unexpected errors
`;

const USAGES: Record<string, string> = Object.fromEntries(
  COMMANDS.flatMap((c) => (c.usage ? [[c.name, c.usage]] : [])),
);

/** Run `bb` with `argv` (without node and script). Returns the exit code. */
export async function runCli(argv: string[], io: CliIo, deps: CliDeps = {}): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case undefined:
      case '-h':
      case '--help':
        io.stdout(HELP);
        return EXIT.OK;
      case 'help': {
        const about = rest[0];
        if (about === 'forklift') {
          io.stdout((await import('@bb/forklift')).FORKLIFT_USAGE);
          return EXIT.OK;
        }
        if (about && !USAGES[about])
          throw new UsageError(`no command ${JSON.stringify(about)}`, HELP);
        io.stdout(about ? USAGES[about]! : HELP);
        return EXIT.OK;
      }
      case '-v':
      case '--version':
        io.stdout(`${version}\n`);
        return EXIT.OK;
      // Each command loads its own dependencies, so `bb --help` and every other
      // command start without Docker, SQLite or the orchestrator in memory.
      case 'demo':
        return await (await import('./commands/demo')).demoCommand(rest, io);
      case 'start':
        return await (await import('./commands/start')).startCommand(rest, io, deps);
      case 'resume':
        return await (await import('./commands/start')).resumeCommand(rest, io, deps);
      case 'orchestrate':
        return await (await import('./commands/orchestrate')).orchestrateCommand(rest, io, deps);
      case 'destroy':
        return await (await import('./commands/bottles')).destroyCommand(rest, io, deps);
      case 'gc':
        return await (await import('./commands/bottles')).gcCommand(rest, io, deps);
      case 'forge':
        return await (await import('./commands/forge')).forgeCommand(rest, io);
      case 'provenance':
        return await (await import('./commands/provenance')).provenanceCommand(rest, io);
      case 'usage':
        return await (await import('./commands/usage')).usageCommand(rest, io);
      case 'forklift': {
        const { runForkliftCli } = await import('@bb/forklift');
        return await runForkliftCli(rest, io, deps.backend?.('docker'));
      }
      case 'supervise':
        return await (await import('./commands/supervise')).superviseCommand(rest, io, deps);
      case 'operator':
        return await (await import('./commands/operator')).operatorCommand(rest, io);
      case 'state':
        return await (await import('./commands/state')).stateCommand(rest, io);
      case 'doctor':
        return await (await import('./commands/doctor')).doctorCommand(
          rest,
          io,
          deps.backend?.('docker'),
        );
      default:
        throw new UsageError(
          command.startsWith('-')
            ? `unknown option ${JSON.stringify(command)}`
            : `unknown command ${JSON.stringify(command)}`,
          HELP,
        );
    }
  } catch (err) {
    if (err instanceof HelpShown) {
      io.stdout(err.usage);
      return EXIT.OK;
    }
    if (err instanceof UsageError) {
      io.stderr(`bb: ${err.message}\n\n${err.usage}`);
      return EXIT.USAGE;
    }
    io.stderr(`bb: ${errorMessage(err)}\n`);
    if (io.env['BB_DEBUG'] === '1') io.stderr(`${(err as Error).stack ?? ''}\n`);
    return isBbError(err, 'INVALID_INPUT') ? EXIT.USAGE : EXIT.FAILURE;
  }
}
