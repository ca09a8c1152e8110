import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import {
  AgentScriptSchema,
  type BottlePlan,
  bridgePrelude,
  type InsidePaths,
  type ModelApiKind,
  planBottle,
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
  /** The agent's plan: its command, variables and limits, its proxy gate's. */
  plan: BottlePlan;
  /** Paths relative to harness-state/. */
  files: Record<string, string | Uint8Array>;
  cmd: string[];
  env: Record<string, string>;
  /** Reads the agent's own account of the run from its stdout. */
  parseResult: (stdout: string, exitCode: number) => { ok: boolean; error?: string | undefined };
}

/** Where forklift's agent sees each part of its run (`planBottle`'s names for them). */
const INSIDE: InsidePaths = {
  home: IN_CONTAINER.home,
  workspace: IN_CONTAINER.workspace,
  runtime: IN_CONTAINER.bin,
  socketDir: IN_CONTAINER.sock,
  // The proxy gate's own: the agent never sees these.
  secrets: '/run/bb-secrets',
  proxy: '/var/bb/proxy',
  state: '/var/bb/state',
  // Nothing of a forge or of supervise: forklift's agent has neither.
  queue: '/var/bb/queue',
  superviseSocket: `${IN_CONTAINER.sock}/supervise.sock`,
  supervise: '/var/bb/supervise',
  currentConfig: '/etc/bot-bottle/current-config',
  mirror: '',
  turns: '',
};

/** What the agent's container is given: 4 GiB and 1024 processes, whatever the project builds. */
const LIMITS = { memory: 4 * 1024 ** 3, pids: 1024 };

/**
 * The plan of forklift's one turn: the provider's headless invocation for
 * `choice`, its files in harness-state/home, and (with model access or an
 * allowlist) a gate that runs the proxies alone. No forge and no supervise:
 * forklift's agent has nothing to call.
 */
export function forkliftPlan(
  choice: AgentChoice,
  prompt: string,
  slug: string,
  image: string,
): BottlePlan {
  const routes = choice.modelRoute
    ? [
        {
          prefix: `/${choice.modelRoute.kind}`,
          upstream: choice.modelRoute.upstream,
          headers: choice.modelRoute.headers,
        },
      ]
    : [];
  return planBottle({
    meta: { slug, image, sessionId: null, forge: null, turns: [], branch: '' },
    agent: {
      model: choice.model,
      ...(choice.name === 'script' ? { script: { turns: [{ steps: choice.script ?? [] }] } } : {}),
    },
    provider: providerFor(choice.name),
    bottles: [{ env: {}, resources: LIMITS }],
    prompt,
    config: {
      routes: JSON.stringify({ routes }),
      allowlist: JSON.stringify({ allow: choice.allow }),
      dockerfile: '',
    },
    inside: INSIDE,
    forgeToken: false,
    supervise: undefined,
    sharedSockets: true,
    mirror: false,
  });
}

/**
 * The agent's command in its container, from its plan: the bridge to the
 * proxies (when it has them) started first, then the provider's headless
 * invocation, with its files in harness-state/home.
 */
export function agentRun(
  choice: AgentChoice,
  prompt: string,
  /** bot-bottle's runtime files (`prepareRuntime`): the script agent and the bridge come from there. */
  runtime: string,
  o: { slug: string; image: string },
): AgentRun {
  const provider = providerFor(choice.name);
  const plan = forkliftPlan(choice, prompt, o.slug, o.image);
  const proxied = !!plan.proxyFiles;
  const files: Record<string, string | Uint8Array> = {};
  for (const [rel, content] of Object.entries(plan.agent.files)) files[`home/${rel}`] = content;
  if (choice.name === 'script')
    files['bin/script-agent.mjs'] = readFileSync(join(runtime, 'script-agent.mjs'));
  if (proxied) files['bin/bb-bridge.mjs'] = readFileSync(join(runtime, 'bb-bridge.mjs'));
  // harness-state/run.sh: the bridge to the proxies, then the CLI (its argv after the script's name).
  files['run.sh'] =
    `#!/bin/sh\n${proxied ? `${bridgePrelude(IN_CONTAINER.bin, IN_CONTAINER.sock)}\n` : ''}exec "$@"\n`;
  return {
    plan,
    files,
    cmd: ['sh', `${IN_CONTAINER.harness}/run.sh`, ...plan.agent.cmd],
    env: { ...plan.agent.env, BB_AGENT_HOME: IN_CONTAINER.home },
    parseResult: (stdout, code) => provider.parseResult(stdout, code),
  };
}
