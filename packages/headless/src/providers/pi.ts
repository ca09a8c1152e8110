import { jsonLines, usageTokens } from './common';
import { type AgentProvider, PROXY_API_KEY } from './provider';

/** pi: `pi -p --mode json`, resumed with `--session <id>`. pi exits 0 on model errors: read the events. */
export const piProvider: AgentProvider = {
  name: 'pi',
  modelApis: ['anthropic', 'openai'],
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
    const ends = lines.filter((o) => o['type'] === 'message_end');
    const errored = lines.some((o) => {
      const m = o['message'] as { stopReason?: string; errorMessage?: string } | undefined;
      return (
        (o['type'] === 'message_end' && (m?.stopReason === 'error' || !!m?.errorMessage)) ||
        (o['type'] === 'auto_retry_end' && o['success'] === false)
      );
    });
    // A turn pi finished names its session and ends at least one message; anything else is garbled.
    const finished = !!session && ends.length > 0;
    const ok = exitCode === 0 && !errored && finished;
    // The last request's prompt as the model read it: its input, cached or not.
    const usage = ends.findLast((o) => (o['message'] as { usage?: unknown } | undefined)?.usage);
    const tokens = usageTokens((usage?.['message'] as { usage?: unknown } | undefined)?.usage, [
      'input',
      'cacheRead',
      'cacheWrite',
    ]);
    return {
      sessionId: typeof session?.['id'] === 'string' ? session['id'] : undefined,
      ok,
      ...(tokens !== undefined ? { tokens } : {}),
      ...(ok
        ? {}
        : {
            error: errored
              ? 'the model API failed (pi reported an error while exiting 0)'
              : exitCode !== 0
                ? `pi exited ${exitCode}`
                : "pi printed no session or no message (its output was not pi's JSON mode)",
          }),
    };
  },
};
