import { jsonText } from '@bb/wall';
import { openState } from '../deps';
import { bold, type CliIo, dim, parse, UsageError } from '../io';
import { OPERATOR_USAGE } from '../usage';

/** `bb operator add|list|revoke`: operators' own tokens for the orchestrator's API. */
export async function operatorCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '-h' || sub === '--help' || sub === 'help') {
    io.stdout(OPERATOR_USAGE);
    return sub === undefined ? 2 : 0;
  }
  const { values, positionals } = parse(rest, { json: { type: 'boolean' } }, OPERATOR_USAGE, {
    positionals: sub === 'list' ? 0 : 1,
  });
  // Where the orchestrator keeps them: BB_DATABASE_URL's PostgreSQL (every replica's), else $BB_HOME.
  const state = await openState(io);
  try {
    const tokens = state.operators;
    const name = () => {
      const n = positionals[0];
      if (!n) throw new UsageError(`bb operator ${sub} needs an operator's name`, OPERATOR_USAGE);
      return n;
    };
    switch (sub) {
      case 'add': {
        const n = name();
        const token = await tokens.add(n);
        if (values['json']) io.stdout(`${jsonText({ name: n, token })}\n`);
        else {
          io.stdout(`${token}\n`);
          io.stderr(
            `${bold(io, `operator ${n}`)}: the token above is shown this once (only its hash is kept). Give it to ${n} as BB_OPERATOR_TOKEN, for bb supervise --server URL.\n`,
          );
        }
        return 0;
      }
      case 'list': {
        const all = await tokens.list();
        if (values['json']) io.stdout(`${jsonText(all, 2)}\n`);
        else if (!all.length) io.stdout('no operators: bb operator add NAME makes one\n');
        else
          io.stdout(
            `${all
              .map(
                (o) =>
                  `${o.name.padEnd(20)} made ${o.createdAt}  ${o.lastUsedAt ? `last used ${o.lastUsedAt}` : dim(io, 'never used')}${o.revokedAt ? `  revoked ${o.revokedAt}` : ''}`,
              )
              .join('\n')}\n`,
          );
        return 0;
      }
      case 'revoke': {
        const n = name();
        await tokens.revoke(n);
        io.stdout(`revoked ${n}'s token\n`);
        return 0;
      }
      default:
        throw new UsageError(`unknown operator command ${JSON.stringify(sub)}`, OPERATOR_USAGE);
    }
  } finally {
    await state.close();
  }
}
