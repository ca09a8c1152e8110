import { launch, resume } from '@bb/headless';
import { type CliDeps, makeBackend } from '../deps';
import { backendName, type CliIo, need, parse, progress, UsageError } from '../io';
import { RESUME_USAGE, START_USAGE } from '../usage';

function headless(values: Record<string, unknown>, usage: string): void {
  if (!values['headless'])
    throw new UsageError(
      'only headless runs exist so far: add --headless (interactive bottles are not built yet)',
      usage,
    );
}

export async function startCommand(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { values, positionals } = parse(
    argv,
    {
      headless: { type: 'boolean' },
      prompt: { type: 'string' },
      bottle: { type: 'string', multiple: true },
      backend: { type: 'string' },
      slug: { type: 'string' },
    },
    START_USAGE,
    { positionals: 1 },
  );
  const [agent] = positionals;
  if (!agent) throw new UsageError('name the agent to start', START_USAGE);
  headless(values, START_USAGE);
  const prompt = need(values, 'prompt', START_USAGE);
  const backend = makeBackend(io, backendName(values['backend'], START_USAGE), deps);
  const out = await launch({
    agent,
    prompt,
    backend,
    env: io.env,
    onProgress: progress(io),
    ...(values['bottle'] ? { bottles: values['bottle'] as string[] } : {}),
    ...(typeof values['slug'] === 'string' ? { slug: values['slug'] } : {}),
  });
  io.stdout(out.output.endsWith('\n') || out.output === '' ? out.output : `${out.output}\n`);
  io.stderr(
    `bb: bottle ${out.slug} is frozen (agent exited ${out.exitCode}${out.error ? `: ${out.error}` : ''}); continue it with: bb resume ${out.slug} --headless --prompt '…'\n`,
  );
  return out.exitCode;
}

export async function resumeCommand(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { values, positionals } = parse(
    argv,
    { headless: { type: 'boolean' }, prompt: { type: 'string' }, backend: { type: 'string' } },
    RESUME_USAGE,
    { positionals: 1 },
  );
  const [slug] = positionals;
  if (!slug) throw new UsageError('name the bottle to resume', RESUME_USAGE);
  headless(values, RESUME_USAGE);
  const prompt = need(values, 'prompt', RESUME_USAGE);
  const backend = makeBackend(io, backendName(values['backend'], RESUME_USAGE), deps);
  const token = io.env['FORGE_TOKEN'];
  const out = await resume({
    slug,
    prompt,
    backend,
    env: io.env,
    onProgress: progress(io),
    ...(token ? { forgeToken: token } : {}),
  });
  io.stdout(out.output.endsWith('\n') || out.output === '' ? out.output : `${out.output}\n`);
  io.stderr(`bb: bottle ${out.slug} is frozen again (agent exited ${out.exitCode})\n`);
  return out.exitCode;
}
