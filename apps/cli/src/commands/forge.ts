// bb forge hook install: create or update the Gitea webhook that feeds the orchestrator.
import { BbError } from '@bb/errors';
import { GiteaClient } from '@bb/forge';
import { type CliIo, needEnv, parse, UsageError } from '../io';
import { FORGE_USAGE } from '../usage';

/** The events the orchestrator acts on (`pull_request` covers PR comments, reviews and pushes). */
export const HOOK_EVENTS = ['issues', 'issue_comment', 'pull_request'];

interface Hook {
  id: number;
  config: { url?: string };
  events: string[];
  active: boolean;
}

async function installHook(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parse(
    argv,
    { repo: { type: 'string' }, org: { type: 'string' }, url: { type: 'string' } },
    FORGE_USAGE,
  );
  if (values['help']) {
    io.stdout(FORGE_USAGE);
    return 0;
  }
  if (positionals.length)
    throw new UsageError(`unexpected ${JSON.stringify(positionals[0])}`, FORGE_USAGE);
  const repo = values['repo'] as string | undefined;
  const org = values['org'] as string | undefined;
  if (!repo === !org)
    throw new UsageError('name exactly one of --repo owner/name or --org name', FORGE_USAGE);
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
      '--url is required: where Gitea delivers, e.g. https://bb.example.com/webhooks/gitea',
      FORGE_USAGE,
    );
  try {
    const u = new URL(url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('not http(s)');
  } catch {
    throw new UsageError(`--url must be an http(s) URL (got ${JSON.stringify(url)})`, FORGE_USAGE);
  }
  const api = needEnv(
    io,
    'FORGE_GITEA_API',
    'the Gitea API URL, e.g. https://gitea.example.com/api/v1',
  );
  const token = needEnv(
    io,
    'FORGE_TOKEN',
    "the bot's token (it must administer the repository or org)",
  );
  const secret = needEnv(
    io,
    'FORGE_WEBHOOK_SECRET',
    'the secret the orchestrator checks deliveries with',
  );
  if (secret.length < 8)
    throw new BbError('INVALID_INPUT', 'FORGE_WEBHOOK_SECRET must be at least 8 characters');
  const client = new GiteaClient({ baseUrl: api, token });
  const base = repo
    ? `/repos/${repo.split('/').map(encodeURIComponent).join('/')}/hooks`
    : `/orgs/${encodeURIComponent(org!)}/hooks`;
  const where = repo ?? `org ${org}`;
  const body = {
    config: { url, content_type: 'json', secret },
    events: HOOK_EVENTS,
    active: true,
  };
  const { body: hooks } = await client.request<Hook[] | null>({ method: 'GET', path: base });
  const existing = (hooks ?? []).find((h) => h.config.url === url);
  if (existing) {
    await client.request({ method: 'PATCH', path: `${base}/${existing.id}`, body });
    io.stdout(
      `updated webhook ${existing.id} of ${where}: ${url}, events ${HOOK_EVENTS.join(', ')}\n`,
    );
  } else {
    const { body: made } = await client.request<Hook>(
      { method: 'POST', path: base, body: { type: 'gitea', ...body } },
      [201],
    );
    io.stdout(`created webhook ${made.id} of ${where}: ${url}, events ${HOOK_EVENTS.join(', ')}\n`);
  }
  io.stdout(
    'Gitea delivers to private addresses only when its [webhook] ALLOWED_HOST_LIST allows them: see docs/gitea-setup.md\n',
  );
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
