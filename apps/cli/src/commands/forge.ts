// bb forge hook install: create or update the forge's webhook that feeds the orchestrator.
import { BbError } from '@bb/errors';
import { forgeKinds } from '@bb/forge';
import { type CliIo, needEnv, parse, UsageError } from '../io';
import { FORGE_USAGE } from '../usage';

async function installHook(argv: string[], io: CliIo): Promise<number> {
  const { values } = parse(
    argv,
    { repo: { type: 'string' }, org: { type: 'string' }, url: { type: 'string' } },
    FORGE_USAGE,
    { positionals: 0 },
  );
  const repo = values['repo'] as string | undefined;
  const org = values['org'] as string | undefined;
  const { kind, site } = forgeKinds.fromEnv(io.env);
  // A GitHub App has one webhook of its own, for every installation: no target.
  const asApp = !!site.credentials && !io.env['FORGE_TOKEN'];
  if (repo && org)
    throw new UsageError('name one of --repo owner/name or --org name, not both', FORGE_USAGE);
  if (!repo && !org && !asApp)
    throw new UsageError('name one of --repo owner/name or --org name', FORGE_USAGE);
  if (repo && !/^[A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+$/.test(repo))
    throw new UsageError(`--repo must be owner/name (got ${JSON.stringify(repo)})`, FORGE_USAGE);
  if (org && !/^[A-Za-z0-9_.-]+$/.test(org))
    throw new UsageError(
      `--org must be an organisation name (got ${JSON.stringify(org)})`,
      FORGE_USAGE,
    );
  const url = values['url'] as string | undefined;
  if (!url)
    throw new UsageError(
      '--url is required: where the forge delivers, e.g. https://bb.example.com/webhooks/gitea',
      FORGE_USAGE,
    );
  try {
    const u = new URL(url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('not http(s)');
  } catch {
    throw new UsageError(`--url must be an http(s) URL (got ${JSON.stringify(url)})`, FORGE_USAGE);
  }
  const token = asApp
    ? undefined
    : needEnv(io, 'FORGE_TOKEN', "the bot's token (it must administer the repository or org)");
  const secret = needEnv(
    io,
    'FORGE_WEBHOOK_SECRET',
    'the secret the orchestrator checks deliveries with',
  );
  if (secret.length < 8)
    throw new BbError('INVALID_INPUT', 'FORGE_WEBHOOK_SECRET must be at least 8 characters');
  if (!site.installHook)
    throw new BbError(
      'INVALID_INPUT',
      `bb cannot create ${kind.name} webhooks: create one by hand that posts to ${url} (path ${kind.webhook.path}) signed with FORGE_WEBHOOK_SECRET`,
    );
  const said = await site.installHook(token, { target: repo ?? org ?? '', url, secret });
  io.stdout(`${said}\n`);
  return 0;
}

export async function forgeCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, action, ...rest] = argv;
  if (sub === undefined) throw new UsageError('name a subcommand: hook install', FORGE_USAGE);
  if (sub === '-h' || sub === '--help') {
    io.stdout(FORGE_USAGE);
    return 0;
  }
  if (sub !== 'hook')
    throw new UsageError(`unknown subcommand ${JSON.stringify(sub)}`, FORGE_USAGE);
  if (action === '-h' || action === '--help') {
    io.stdout(FORGE_USAGE);
    return 0;
  }
  if (action !== 'install')
    throw new UsageError(
      `unknown hook action ${JSON.stringify(action ?? '')}: use install`,
      FORGE_USAGE,
    );
  return installHook(rest, io);
}
