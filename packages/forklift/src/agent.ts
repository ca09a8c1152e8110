import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import {
  AgentScriptSchema,
  bridgePrelude,
  type ModelApiKind,
  modelApiUrl,
  providerFor,
  providerNames,
} from '@bb/headless';

/** The agents forklift runs: bot-bottle's registered providers (`registerProvider`). */
export const agentNames = (): string[] => providerNames();
/** A registered provider's name. */
export type AgentName = string;

/** The model API the credential proxy forwards to, and the headers it adds (secret references only). */
export interface ModelRoute {
  kind: ModelApiKind;
  upstream: string;
  headers: Record<string, string>;
}

/** Which agent runs, with what model access and what outbound network. */
export interface AgentChoice {
  name: AgentName;
  model?: string | undefined;
  /** The script agent's steps (`--script FILE`). */
  script?: unknown[] | undefined;
  /** Model access for claude, codex and pi: through the credential proxy, never a key in the container. */
  modelRoute?: ModelRoute | undefined;
  /** Hosts the agent may reach through the egress proxy (dependency downloads); never a credential. */
  allow: string[];
}

/**
 * The default egress allowlist: the package registries a kitchen-sink user
 * needs to install a project's dependencies (npm, PyPI, crates.io, Go modules,
 * RubyGems, Maven, Gradle, NuGet). No forge and no code host: the agent has
 * nothing to push and no one to talk to.
 */
export const DEFAULT_ALLOW = [
  'registry.npmjs.org',
  'registry.yarnpkg.com',
  'pypi.org',
  'files.pythonhosted.org',
  'crates.io',
  'index.crates.io',
  'static.crates.io',
  'proxy.golang.org',
  'sum.golang.org',
  'rubygems.org',
  'repo.maven.apache.org',
  'repo1.maven.org',
  'plugins.gradle.org',
  'services.gradle.org',
  'api.nuget.org',
];

/** Where the paths the agent's container sees are. */
export const IN_CONTAINER = {
  workspace: '/workspace',
  harness: '/harness-state',
  home: '/harness-state/home',
  bin: '/harness-state/bin',
  sock: '/harness-state/sock',
  prompt: '/harness-state/prompt.md',
} as const;

/**
 * The model route for an agent from the host's environment: claude (and pi by
 * default) speak Anthropic's API with `ANTHROPIC_API_KEY`, codex OpenAI's with
 * `OPENAI_API_KEY` (pi too when only that is set). `FORKLIFT_MODEL_URL` points
 * the route at another endpoint (a gateway, a local model, a test server).
 * Returns the route and the extra secrets the proxy reads (the bearer header).
 */
export function modelRouteFromEnv(
  name: AgentName,
  env: Record<string, string | undefined>,
): { route: ModelRoute; secrets: Record<string, string> } {
  // The provider says which model APIs its CLI speaks: the first whose key is set, else its first.
  const apis = providerFor(name).modelApis;
  const has = (k: ModelApiKind) =>
    !!env[k === 'anthropic' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY'];
  const kind = apis.find(has) ?? apis[0];
  if (!kind)
    throw new BbError(
      'INVALID_INPUT',
      `--agent ${name} calls no model API: it needs no model route (give its steps with --script if it is the script agent)`,
    );
  const key = kind === 'anthropic' ? 'ANTHROPIC_API_KEY' : 'OPENAI_API_KEY';
  if (!env[key])
    throw new BbError(
      'INVALID_INPUT',
      `--agent ${name} needs ${key} in forklift's environment: the credential proxy adds it to the agent's model requests (the container never holds it)`,
    );
  const upstream =
    env['FORKLIFT_MODEL_URL'] ||
    (kind === 'anthropic' ? 'https://api.anthropic.com' : 'https://api.openai.com');
  try {
    new URL(upstream);
  } catch {
    throw new BbError(
      'INVALID_INPUT',
      `FORKLIFT_MODEL_URL ${JSON.stringify(upstream)} is not a URL: give the model API's base URL, such as https://api.anthropic.com`,
    );
  }
  if (kind === 'anthropic')
    return { route: { kind, upstream, headers: { 'x-api-key': `env:${key}` } }, secrets: {} };
  // OpenAI wants "Bearer <key>": the proxy is handed the header's value whole.
  return {
    route: { kind, upstream, headers: { authorization: 'env:FORKLIFT_MODEL_BEARER' } },
    secrets: { FORKLIFT_MODEL_BEARER: `Bearer ${env[key]}` },
  };
}

/** Read and check a script agent's steps (a JSON array) from `file`. */
export function readScript(file: string): unknown[] {
  let steps: unknown;
  try {
    steps = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `--script ${file}: ${(err as Error).message} (give a JSON array of script-agent steps)`,
    );
  }
  const parsed = AgentScriptSchema.safeParse({ turns: [{ steps }] });
  if (!Array.isArray(steps) || !parsed.success)
    throw new BbError(
      'INVALID_INPUT',
      `--script ${file} is not a list of script-agent steps: ${parsed.success ? 'not an array' : parsed.error.issues[0]?.message}`,
    );
  return steps;
}

/** What the host places in `harness-state/` and runs in the container for `choice`. */
export interface AgentRun {
  /** Paths relative to harness-state/. */
  files: Record<string, string | Uint8Array>;
  cmd: string[];
  env: Record<string, string>;
  /** Reads the agent's own account of the run from its stdout. */
  parseResult: (stdout: string, exitCode: number) => { ok: boolean; error?: string | undefined };
}

/**
 * The agent's command in its container: the bridge to the proxies (when it has
 * them) started first, then the provider's headless invocation, with its files
 * in harness-state/home. No forge tool: forklift's agent has nothing to call.
 */
export function agentRun(
  choice: AgentChoice,
  prompt: string,
  proxied: boolean,
  /** bot-bottle's runtime files (`prepareRuntime`): the script agent and the bridge come from there. */
  runtime: string,
): AgentRun {
  const provider = providerFor(choice.name);
  const invocation = provider.invocation({
    prompt,
    home: IN_CONTAINER.home,
    runtimeDir: IN_CONTAINER.bin,
    ...(choice.model ? { model: choice.model } : {}),
    ...(choice.modelRoute
      ? { modelApi: { kind: choice.modelRoute.kind, baseUrl: modelApiUrl(choice.modelRoute.kind) } }
      : {}),
  });
  const files: Record<string, string | Uint8Array> = {};
  for (const [rel, content] of Object.entries(invocation.files)) files[`home/${rel}`] = content;
  if (choice.name === 'script') {
    files['bin/script-agent.mjs'] = readFileSync(join(runtime, 'script-agent.mjs'));
    files['home/.bb/script.json'] = JSON.stringify({ turns: [{ steps: choice.script ?? [] }] });
  }
  if (proxied) files['bin/bb-bridge.mjs'] = readFileSync(join(runtime, 'bb-bridge.mjs'));
  // harness-state/run.sh: the bridge to the proxies, then the CLI (its argv after the script's name).
  files['run.sh'] =
    `#!/bin/sh\n${proxied ? `${bridgePrelude(IN_CONTAINER.bin, IN_CONTAINER.sock)}\n` : ''}exec "$@"\n`;
  return {
    files,
    cmd: ['sh', `${IN_CONTAINER.harness}/run.sh`, ...invocation.cmd],
    env: { ...invocation.env, BB_AGENT_HOME: IN_CONTAINER.home },
    parseResult: (stdout, code) => provider.parseResult(stdout, code),
  };
}
