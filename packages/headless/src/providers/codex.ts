import { jsonLines, usageTokens } from './common';
import { type AgentProvider, PROXY_API_KEY } from './provider';

/** Codex: `codex exec --json …`, resumed with `codex exec resume … <thread_id>`. */
export const codexProvider: AgentProvider = {
  name: 'codex',
  modelApis: ['openai'],
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
