import { jsonLines, mcpServers, usageTokens } from './common';
import { type AgentProvider, PROXY_API_KEY } from './provider';

/**
 * Claude Code: `claude -p PROMPT --output-format stream-json --verbose`, resumed
 * with `--resume <session_id>`. Streamed, so the session is named on the first
 * line (`system`/`init`): a turn stopped before its end still names it.
 */
export const claudeProvider: AgentProvider = {
  name: 'claude',
  modelApis: ['anthropic'],
  invocation(input) {
    const cmd = [
      'claude',
      '-p',
      input.prompt,
      '--output-format',
      'stream-json',
      '--verbose',
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
    const lines = jsonLines(stdout);
    const result = lines.findLast((o) => o['type'] === 'result');
    if (!result) {
      const init = lines.find((o) => o['type'] === 'system' && o['subtype'] === 'init');
      return {
        // Stopped before its end: the session it began is still the one to resume.
        sessionId: typeof init?.['session_id'] === 'string' ? init['session_id'] : undefined,
        ok: false,
        error: `claude printed no result (exit ${exitCode})`,
      };
    }
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
