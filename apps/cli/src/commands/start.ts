import { launch, resume } from '@bb/headless';
import { type CliDeps, makeBackend } from '../deps';
import { backendName, type CliIo, need, parse, progress, UsageError } from '../io';
import { RESUME_USAGE, START_USAGE } from '../usage';

/**
 * What `bb start` and `bb resume` share: the one name they take (`what` says
 * which), a headless run, a prompt and the backend it runs on.
 */
function turnArgs(
  values: Record<string, unknown>,
  positionals: string[],
  what: string,
  usage: string,
  io: CliIo,
  deps: CliDeps,
) {
  const [name] = positionals;
  if (!name) throw new UsageError(`name the ${what}`, usage);
  if (!values['headless'])
    throw new UsageError(
      'only headless runs exist so far: add --headless (interactive bottles are not built yet)',
      usage,
    );
  const prompt = need(values, 'prompt', usage);
  const backend = makeBackend(io, backendName(values['backend'], usage), deps);
  return { name, prompt, backend };
}

/** The agent's output, ending in a newline. */
const printOutput = (io: CliIo, output: string) =>
  io.stdout(output.endsWith('\n') || output === '' ? output : `${output}\n`);

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
  const turn = turnArgs(values, positionals, 'agent to start', START_USAGE, io, deps);
  const out = await launch({
    agent: turn.name,
    prompt: turn.prompt,
    backend: turn.backend,
    env: io.env,
    onProgress: progress(io),
    ...(values['bottle'] ? { bottles: values['bottle'] as string[] } : {}),
    ...(typeof values['slug'] === 'string' ? { slug: values['slug'] } : {}),
  });
  printOutput(io, out.output);
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
  const turn = turnArgs(values, positionals, 'bottle to resume', RESUME_USAGE, io, deps);
  const token = io.env['FORGE_TOKEN'];
  const out = await resume({
    slug: turn.name,
    prompt: turn.prompt,
    backend: turn.backend,
    env: io.env,
    onProgress: progress(io),
    ...(token ? { forgeToken: token } : {}),
  });
  printOutput(io, out.output);
  io.stderr(`bb: bottle ${out.slug} is frozen again (agent exited ${out.exitCode})\n`);
  return out.exitCode;
}
