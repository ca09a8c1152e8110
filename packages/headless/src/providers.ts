import { BbError } from '@bb/errors';

/** What a provider needs to start one turn of an agent. */
export interface TurnInput {
  prompt: string;
  /** The session to continue; absent on the first turn. Never "the latest": always this id. */
  sessionId?: string | undefined;
  model?: string | undefined;
  /** The agent's home inside the bottle (kept across freeze and rehydrate). */
  home: string;
  /** Where the runtime files (bb-forge, the MCP bridge, the script agent) are mounted. */
  runtimeDir: string;
  /** The forge sidecar's socket inside the bottle; absent: the agent has no forge tools (forklift). */
  socket?: string | undefined;
  /** The supervise sidecar's socket, when the bottle has a supervise plane. */
  superviseSocket?: string | undefined;
  /**
   * The model API as the bottle reaches it: the in-bottle bridge to the
   * credential proxy, which adds the real key. Absent: the CLI's own default.
   */
  modelApi?: { kind: 'anthropic' | 'openai'; baseUrl: string } | undefined;
  /** Model request retries before the turn fails. @default 2 */
  retries?: number | undefined;
}

/** What the CLI sends as its API key: a placeholder the credential proxy replaces. */
export const PROXY_API_KEY = 'bb-credential-proxy-adds-the-key';

/** How to run one turn: argv, environment, and files to place in the agent's home first. */
export interface Invocation {
  cmd: string[];
  env: Record<string, string>;
  /** Paths relative to the home. */
  files: Record<string, string>;
}

export interface TurnResult {
  sessionId: string | undefined;
  ok: boolean;
  /** Why the turn failed, when the CLI said. */
  error?: string;
  /**
   * The input tokens the model read in this turn (cached ones included), when
   * the CLI reports usage: how large the conversation has grown.
   */
  tokens?: number;
}

/** The sum of the named numeric fields of a usage object, or undefined without one. */
function usageTokens(usage: unknown, fields: string[]): number | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const n = fields.reduce((sum, f) => sum + (typeof u[f] === 'number' ? (u[f] as number) : 0), 0);
  return fields.some((f) => typeof u[f] === 'number') ? n : undefined;
}

/** Builds an agent CLI's headless invocation and reads its result. */
export interface AgentProvider {
  readonly name: 'claude' | 'codex' | 'pi' | 'script';
  invocation(input: TurnInput): Invocation;
  parseResult(stdout: string, exitCode: number): TurnResult;
}

const jsonLines = (text: string): Array<Record<string, unknown>> =>
  text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('{'))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, unknown>];
      } catch {
        return [];
      }
    });

const forgeServer = (socket: string, input: TurnInput) => ({
  command: 'node',
  args: [`${input.runtimeDir}/bb-forge-mcp.mjs`],
  env: { BB_SIDECAR_SOCKET: socket },
});

/** The MCP servers a bottle's agent has: the forge, and the supervise tools when supervised. */
const mcpServers = (input: TurnInput) => ({
  ...(input.socket ? { forge: forgeServer(input.socket, input) } : {}),
  ...(input.superviseSocket
    ? {
        supervise: {
          command: 'node',
          args: [`${input.runtimeDir}/bb-supervise-mcp.mjs`],
          env: { BB_SUPERVISE_SOCKET: input.superviseSocket },
        },
      }
    : {}),
});

/** Claude Code: `claude -p PROMPT --output-format json`, resumed with `--resume <session_id>`. */
export const claudeProvider: AgentProvider = {
  name: 'claude',
  invocation(input) {
    const cmd = [
      'claude',
      '-p',
      input.prompt,
      '--output-format',
      'json',
      '--dangerously-skip-permissions',
      '--mcp-config',
      `${input.home}/.bb/mcp.json`,
      '--strict-mcp-config',
    ];
    if (input.model) cmd.push('--model', input.model);
    // Always the recorded session, never "continue the latest".
    if (input.sessionId) cmd.push('--resume', input.sessionId);
    return {
      cmd,
      env: {
        CLAUDE_CONFIG_DIR: `${input.home}/.claude`,
        CLAUDE_CODE_TMPDIR: `${input.home}/.bb/tmp`,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
        // The forge tools in tools[] rather than behind ToolSearch.
        ENABLE_TOOL_SEARCH: 'false',
        CLAUDE_CODE_MAX_RETRIES: String(input.retries ?? 2),
        ...(input.modelApi?.kind === 'anthropic'
          ? { ANTHROPIC_BASE_URL: input.modelApi.baseUrl, ANTHROPIC_API_KEY: PROXY_API_KEY }
          : {}),
      },
      files: {
        '.bb/mcp.json': JSON.stringify({ mcpServers: mcpServers(input) }, null, 2),
        '.bb/tmp/.keep': '',
      },
    };
  },
  parseResult(stdout, exitCode) {
    const result = jsonLines(stdout).findLast((o) => o['type'] === 'result');
    if (!result)
      return {
        sessionId: undefined,
        ok: false,
        error: `claude printed no result (exit ${exitCode})`,
      };
    const isError = result['is_error'] === true || exitCode !== 0;
    const tokens = usageTokens(result['usage'], [
      'input_tokens',
      'cache_creation_input_tokens',
      'cache_read_input_tokens',
    ]);
    return {
      sessionId: typeof result['session_id'] === 'string' ? result['session_id'] : undefined,
      ok: !isError,
      ...(isError ? { error: String(result['result'] ?? result['subtype'] ?? 'error') } : {}),
      ...(tokens !== undefined ? { tokens } : {}),
    };
  },
};

/** Codex: `codex exec --json …`, resumed with `codex exec resume … <thread_id>`. */
export const codexProvider: AgentProvider = {
  name: 'codex',
  invocation(input) {
    const common = [
      '--json',
      '--skip-git-repo-check',
      '--dangerously-bypass-approvals-and-sandbox',
      '--disable',
      'plugins',
      '-c',
      'analytics.enabled=false',
    ];
    if (input.model) common.push('-m', input.model);
    const cmd = input.sessionId
      ? ['codex', 'exec', 'resume', ...common, input.sessionId, input.prompt]
      : ['codex', 'exec', ...common, input.prompt];
    const retries = input.retries ?? 2;
    const provider =
      input.modelApi?.kind === 'openai'
        ? [
            'model_provider = "bb"',
            ...(input.model ? [] : ['model = "default"']),
            '',
            '[model_providers.bb]',
            'name = "bot-bottle credential proxy"',
            `base_url = "${input.modelApi.baseUrl}/v1"`,
            'env_key = "BB_MODEL_API_KEY"',
            'wire_api = "responses"',
            `request_max_retries = ${retries}`,
            `stream_max_retries = ${retries}`,
            '',
          ]
        : [];
    const toml = [
      ...provider,
      ...(input.socket
        ? [
            '[mcp_servers.forge]',
            'command = "node"',
            `args = ["${input.runtimeDir}/bb-forge-mcp.mjs"]`,
            `env = { BB_SIDECAR_SOCKET = "${input.socket}" }`,
            '',
          ]
        : []),
      ...(input.superviseSocket
        ? [
            '[mcp_servers.supervise]',
            'command = "node"',
            `args = ["${input.runtimeDir}/bb-supervise-mcp.mjs"]`,
            `env = { BB_SUPERVISE_SOCKET = "${input.superviseSocket}" }`,
            // A supervise call waits for the operator up to 45 s before answering pending.
            'tool_timeout_sec = 120',
            '',
          ]
        : []),
    ].join('\n');
    return {
      cmd,
      env: {
        CODEX_HOME: `${input.home}/.codex`,
        ...(input.modelApi?.kind === 'openai' ? { BB_MODEL_API_KEY: PROXY_API_KEY } : {}),
      },
      files: { '.codex/config.toml': toml },
    };
  },
  parseResult(stdout, exitCode) {
    const lines = jsonLines(stdout);
    const started = lines.find((o) => o['type'] === 'thread.started');
    const failed = lines.find((o) => o['type'] === 'turn.failed');
    const completed = lines.findLast((o) => o['type'] === 'turn.completed');
    const ok = exitCode === 0 && !failed && !!completed;
    // OpenAI's input_tokens already count the cached ones.
    const tokens = usageTokens(completed?.['usage'], ['input_tokens']);
    return {
      sessionId: typeof started?.['thread_id'] === 'string' ? started['thread_id'] : undefined,
      ok,
      ...(tokens !== undefined ? { tokens } : {}),
      ...(ok
        ? {}
        : {
            error: failed
              ? JSON.stringify((failed['error'] as object) ?? failed)
              : `codex exited ${exitCode} without completing the turn`,
          }),
    };
  },
};

/** pi: `pi -p --mode json`, resumed with `--session <id>`. pi exits 0 on model errors: read the events. */
export const piProvider: AgentProvider = {
  name: 'pi',
  invocation(input) {
    const cmd = ['pi', '-p', '--mode', 'json'];
    const files: Record<string, string> = {};
    const retries = input.retries ?? 2;
    files['.pi/agent/settings.json'] = JSON.stringify({
      retry: { enabled: retries > 0, maxRetries: retries, provider: { maxRetries: 0 } },
    });
    if (input.modelApi) {
      const model = input.model ?? 'default';
      files['.pi/agent/models.json'] = JSON.stringify({
        providers: {
          bb: {
            // pi appends /v1/messages itself for Anthropic; OpenAI base URLs end in /v1.
            baseUrl:
              input.modelApi.kind === 'anthropic'
                ? input.modelApi.baseUrl
                : `${input.modelApi.baseUrl}/v1`,
            api: input.modelApi.kind === 'anthropic' ? 'anthropic-messages' : 'openai-completions',
            apiKey: PROXY_API_KEY,
            models: [{ id: model }],
          },
        },
      });
      cmd.push('--provider', 'bb', '--model', model);
    } else if (input.model) cmd.push('--model', input.model);
    if (input.sessionId) cmd.push('--session', input.sessionId);
    cmd.push(input.prompt);
    return {
      cmd,
      env: {
        PI_CODING_AGENT_DIR: `${input.home}/.pi/agent`,
        PI_OFFLINE: '1',
        PI_TELEMETRY: '0',
        // pi has no MCP: it reaches the forge with this command through its bash tool.
        ...(input.socket
          ? { BB_SIDECAR_SOCKET: input.socket, BB_FORGE: `node ${input.runtimeDir}/bb-forge.mjs` }
          : {}),
        ...(input.superviseSocket
          ? {
              BB_SUPERVISE_SOCKET: input.superviseSocket,
              BB_SUPERVISE: `node ${input.runtimeDir}/bb-supervise.mjs`,
            }
          : {}),
      },
      files,
    };
  },
  parseResult(stdout, exitCode) {
    const lines = jsonLines(stdout);
    const session = lines.find((o) => o['type'] === 'session');
    const errored = lines.some((o) => {
      const m = o['message'] as { stopReason?: string; errorMessage?: string } | undefined;
      return (
        (o['type'] === 'message_end' && (m?.stopReason === 'error' || !!m?.errorMessage)) ||
        (o['type'] === 'auto_retry_end' && o['success'] === false)
      );
    });
    const ok = exitCode === 0 && !errored;
    return {
      sessionId: typeof session?.['id'] === 'string' ? session['id'] : undefined,
      ok,
      ...(ok
        ? {}
        : {
            error: errored
              ? 'the model API failed (pi reported an error while exiting 0)'
              : `pi exited ${exitCode}`,
          }),
    };
  },
};

/** The deterministic script agent (tests and the demo). */
export const scriptProvider: AgentProvider = {
  name: 'script',
  invocation(input) {
    const cmd = ['node', `${input.runtimeDir}/script-agent.mjs`, '--prompt', input.prompt];
    if (input.sessionId) cmd.push('--resume', input.sessionId);
    return {
      cmd,
      env: {
        ...(input.socket ? { BB_SIDECAR_SOCKET: input.socket } : {}),
        BB_AGENT_HOME: input.home,
      },
      files: {},
    };
  },
  parseResult(stdout, exitCode) {
    const result = jsonLines(stdout).findLast((o) => o['type'] === 'result');
    const tokens = usageTokens(result?.['usage'], ['input_tokens']);
    return {
      sessionId: typeof result?.['session_id'] === 'string' ? result['session_id'] : undefined,
      ok: exitCode === 0 && result?.['is_error'] !== true,
      ...(exitCode === 0
        ? {}
        : { error: String(result?.['error'] ?? `script agent exited ${exitCode}`) }),
      ...(tokens !== undefined ? { tokens } : {}),
    };
  },
};

export const PROVIDERS: Record<AgentProvider['name'], AgentProvider> = {
  claude: claudeProvider,
  codex: codexProvider,
  pi: piProvider,
  script: scriptProvider,
};

export function providerFor(name: string): AgentProvider {
  const p = PROVIDERS[name as AgentProvider['name']];
  if (!p)
    throw new BbError(
      'INVALID_INPUT',
      `unknown agent provider ${JSON.stringify(name)}: use claude, codex, pi or script`,
    );
  return p;
}
