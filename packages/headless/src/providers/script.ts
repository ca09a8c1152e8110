import { jsonLines, usageTokens } from './common';
import type { AgentProvider } from './provider';

/** The deterministic script agent (tests and the demo). */
export const scriptProvider: AgentProvider = {
  name: 'script',
  modelApis: [],
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
    // No result line: the output is not the script agent's, whatever the exit code.
    const ok = exitCode === 0 && !!result && result['is_error'] !== true;
    // Its first line names the session: a turn stopped before its end still does.
    const began = result ?? jsonLines(stdout).find((o) => o['type'] === 'turn');
    return {
      sessionId: typeof began?.['session_id'] === 'string' ? began['session_id'] : undefined,
      ok,
      ...(ok
        ? {}
        : {
            error: String(
              result?.['error'] ??
                (exitCode !== 0
                  ? `script agent exited ${exitCode}`
                  : result
                    ? 'the script agent reported an error'
                    : 'the script agent printed no result'),
            ),
          }),
      ...(tokens !== undefined ? { tokens } : {}),
    };
  },
};
