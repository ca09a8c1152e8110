import { readFileSync } from 'node:fs';
import { errorMessage, isBbError } from '@bb/errors';
import { SuperviseClient } from './client';
import {
  CURRENT_CONFIG_DIR,
  KIND_NAMES,
  KINDS,
  TOOL_NAMES,
  type ToolAnswer,
  type ToolName,
} from './contract';

export const BB_SUPERVISE_USAGE = `bb-supervise: ask the operator for a configuration change this bottle needs
(in a bottle: $BB_SUPERVISE)

  bb-supervise <tool> --file FILE --why TEXT [--wait SECONDS]
  bb-supervise wait REQUEST_ID [--wait SECONDS]
  bb-supervise config

tools (the whole new file; start from ${CURRENT_CONFIG_DIR}/):
${KIND_NAMES.map((k) => `  ${KINDS[k].tool.padEnd(18)} ${KINDS[k].file.padEnd(15)} when ${KINDS[k].when}`).join('\n')}

FILE may be - for standard input. Waits for the decision up to --wait seconds
(default 45), then prints the request's state as JSON.
exit: 0 approved or modified, 3 still pending (run: bb-supervise wait ID),
4 rejected, 5 expired or cancelled, 2 usage, 1 error.
`;

const EXIT: Record<ToolAnswer['status'], number> = {
  approved: 0,
  modified: 0,
  pending: 3,
  rejected: 4,
  expired: 5,
  cancelled: 5,
};

/** Run `bb-supervise` with `argv` (after the command name). Resolves the exit code. */
export async function runBbSupervise(
  argv: string[],
  io: { out: (s: string) => void; err: (s: string) => void; stdin?: () => string } = {
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
  },
  client: SuperviseClient = new SuperviseClient(),
): Promise<number> {
  const [cmd, ...rest] = argv;
  const flags: Record<string, string> = {};
  const positional: string[] = [];
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i]!;
    if (a.startsWith('--')) {
      const v = rest[i + 1];
      if (v === undefined) {
        io.err(`bb-supervise: ${a} needs a value\n`);
        return 2;
      }
      flags[a.slice(2)] = v;
      i++;
    } else positional.push(a);
  }
  if (!cmd || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    (cmd ? io.out : io.err)(BB_SUPERVISE_USAGE);
    return cmd ? 0 : 2;
  }
  const waitMs = flags['wait'] !== undefined ? Math.round(Number(flags['wait']) * 1000) : undefined;
  if (waitMs !== undefined && !(waitMs >= 0)) {
    io.err(`bb-supervise: --wait ${flags['wait']} is not a number of seconds\n`);
    return 2;
  }
  try {
    let a: ToolAnswer;
    if (cmd === 'config') {
      io.out(`${JSON.stringify(await client.config(), null, 2)}\n`);
      return 0;
    } else if (cmd === 'wait') {
      if (!positional[0]) {
        io.err('bb-supervise: wait needs the request id\n');
        return 2;
      }
      a = await client.wait(positional[0], waitMs);
    } else if ((TOOL_NAMES as string[]).includes(cmd)) {
      const kind = KIND_NAMES.find((k) => KINDS[k].tool === cmd)!;
      if (!flags['file'] || !flags['why']) {
        io.err(
          `bb-supervise: ${cmd} needs --file FILE (the whole new ${KINDS[kind].file}) and --why TEXT\n`,
        );
        return 2;
      }
      const text =
        flags['file'] === '-'
          ? (io.stdin ?? (() => readFileSync(0, 'utf8')))()
          : readFileSync(flags['file'], 'utf8');
      a = await client.propose(
        cmd as ToolName,
        { [KINDS[kind].field]: text, justification: flags['why'] },
        waitMs,
      );
    } else {
      io.err(`bb-supervise: unknown command ${JSON.stringify(cmd)}\n\n${BB_SUPERVISE_USAGE}`);
      return 2;
    }
    io.out(`${JSON.stringify(a, null, 2)}\n`);
    return EXIT[a.status];
  } catch (err) {
    io.err(`bb-supervise: ${isBbError(err) ? `${err.code}: ` : ''}${errorMessage(err)}\n`);
    return 1;
  } finally {
    await client.close().catch(() => {});
  }
}
