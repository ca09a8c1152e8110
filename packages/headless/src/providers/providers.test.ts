import { describe, expect, it } from 'vitest';
import {
  claudeProvider,
  codexProvider,
  PROXY_API_KEY,
  piProvider,
  providerFor,
  scriptProvider,
  type TurnInput,
  validSessionId,
} from './index';

const input = (over: Partial<TurnInput> = {}): TurnInput => ({
  prompt: 'fix it',
  home: '/home/bottle',
  runtimeDir: '/opt/bb',
  socket: '/run/bb/forge.sock',
  ...over,
});

describe('agent providers', () => {
  it('an agent with no forge socket (forklift) is given no forge tool by any CLI', () => {
    const none = input({ socket: undefined });
    expect(JSON.parse(claudeProvider.invocation(none).files['.bb/mcp.json']!)).toEqual({
      mcpServers: {},
    });
    expect(codexProvider.invocation(none).files['.codex/config.toml']).not.toContain('forge');
    const pi = piProvider.invocation(none).env;
    expect(pi['BB_FORGE']).toBeUndefined();
    expect(pi['BB_SIDECAR_SOCKET']).toBeUndefined();
    expect(scriptProvider.invocation(none).env['BB_SIDECAR_SOCKET']).toBeUndefined();
  });

  it('claude: -p with streamed JSON output, resumed by --resume <id> and never --continue', () => {
    const first = claudeProvider.invocation(input({ model: 'm1' }));
    expect(first.cmd.slice(0, 6)).toEqual([
      'claude',
      '-p',
      'fix it',
      '--output-format',
      'stream-json',
      '--verbose',
    ]);
    expect(first.cmd).toContain('--dangerously-skip-permissions');
    expect(first.cmd).not.toContain('--continue');
    expect(first.env).toMatchObject({
      CLAUDE_CONFIG_DIR: '/home/bottle/.claude',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    });
    expect(JSON.parse(first.files['.bb/mcp.json']!).mcpServers.forge).toEqual({
      command: 'node',
      args: ['/opt/bb/bb-forge-mcp.mjs'],
      env: { BB_SIDECAR_SOCKET: '/run/bb/forge.sock' },
    });
    const again = claudeProvider.invocation(input({ sessionId: 'abc' }));
    expect(again.cmd.slice(-2)).toEqual(['--resume', 'abc']);
    expect(
      claudeProvider.parseResult(
        '{"type":"result","subtype":"success","is_error":false,"session_id":"s-1"}\n',
        0,
      ),
    ).toEqual({ sessionId: 's-1', ok: true });
    // Usage, when the CLI reports it: every input token the model read, cached ones too.
    expect(
      claudeProvider.parseResult(
        '{"type":"result","is_error":false,"session_id":"s-1","usage":{"input_tokens":12,"cache_creation_input_tokens":300,"cache_read_input_tokens":4000,"output_tokens":99}}',
        0,
      ).tokens,
    ).toBe(4312);
    expect(
      claudeProvider.parseResult(
        '{"type":"result","is_error":true,"result":"API Error: 500","session_id":"s-1"}',
        1,
      ).ok,
    ).toBe(false);
  });

  it('codex: exec --json, resumed with exec resume … <thread_id>, session id from thread.started', () => {
    expect(codexProvider.invocation(input()).cmd.slice(0, 3)).toEqual(['codex', 'exec', '--json']);
    const again = codexProvider.invocation(input({ sessionId: 't-1' })).cmd;
    expect(again.slice(0, 4)).toEqual(['codex', 'exec', 'resume', '--json']);
    expect(again.slice(-2)).toEqual(['t-1', 'fix it']);
    const out = [
      '{"type":"thread.started","thread_id":"t-9"}',
      '{"type":"turn.started"}',
      '{"type":"turn.completed","usage":{}}',
    ].join('\n');
    expect(codexProvider.parseResult(out, 0)).toEqual({ sessionId: 't-9', ok: true });
    expect(
      codexProvider.parseResult(
        out.replace(
          '"usage":{}',
          '"usage":{"input_tokens":5000,"cached_input_tokens":4000,"output_tokens":7}',
        ),
        0,
      ).tokens,
    ).toBe(5000);
    expect(
      codexProvider.parseResult(
        '{"type":"thread.started","thread_id":"t-9"}\n{"type":"turn.failed","error":{"message":"500"}}',
        1,
      ).ok,
    ).toBe(false);
  });

  it('pi: -p --mode json, resumed with --session <id>; exit 0 with a model error is a failure', () => {
    expect(piProvider.invocation(input({ sessionId: 'p-1' })).cmd).toEqual([
      'pi',
      '-p',
      '--mode',
      'json',
      '--session',
      'p-1',
      'fix it',
    ]);
    const ok =
      '{"type":"session","version":3,"id":"p-7"}\n{"type":"message_end","message":{"stopReason":"stop"}}';
    expect(piProvider.parseResult(ok, 0)).toEqual({ sessionId: 'p-7', ok: true });
    const bad =
      '{"type":"session","version":3,"id":"p-7"}\n{"type":"message_end","message":{"stopReason":"error","errorMessage":"500"}}';
    expect(piProvider.parseResult(bad, 0)).toMatchObject({ sessionId: 'p-7', ok: false });
  });

  it('script: runs the bundled script agent, resumed by id', () => {
    expect(scriptProvider.invocation(input({ sessionId: 's' })).cmd).toEqual([
      'node',
      '/opt/bb/script-agent.mjs',
      '--prompt',
      'fix it',
      '--resume',
      's',
    ]);
    expect(() => providerFor('gpt')).toThrow(/unknown agent provider "gpt"/);
  });
});

describe('model APIs through the credential proxy', () => {
  const base = {
    prompt: 'go',
    home: '/home/bottle',
    runtimeDir: '/opt/bb',
    socket: '/run/bb/forge.sock',
    model: 'some-model',
    retries: 0,
  };
  it('claude: the bridge as ANTHROPIC_BASE_URL, a placeholder key, bounded retries, forge tools up front', () => {
    const inv = claudeProvider.invocation({
      ...base,
      modelApi: { kind: 'anthropic', baseUrl: 'http://127.0.0.1:3129/anthropic' },
    });
    expect(inv.env).toMatchObject({
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:3129/anthropic',
      ANTHROPIC_API_KEY: PROXY_API_KEY,
      CLAUDE_CODE_MAX_RETRIES: '0',
      ENABLE_TOOL_SEARCH: 'false',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    });
    expect(inv.cmd).toContain('--strict-mcp-config');
    expect(claudeProvider.invocation(base).env).not.toHaveProperty('ANTHROPIC_BASE_URL');
  });

  it('codex: a custom Responses provider on the bridge with retries off', () => {
    const inv = codexProvider.invocation({
      ...base,
      modelApi: { kind: 'openai', baseUrl: 'http://127.0.0.1:3129/openai' },
    });
    const toml = inv.files['.codex/config.toml']!;
    expect(toml).toContain('model_provider = "bb"');
    expect(toml).toContain('base_url = "http://127.0.0.1:3129/openai/v1"');
    expect(toml).toContain('wire_api = "responses"');
    expect(toml).toContain('request_max_retries = 0');
    expect(toml).toContain('[mcp_servers.forge]');
    expect(inv.env['BB_MODEL_API_KEY']).toBe(PROXY_API_KEY);
  });

  it('pi: a models.json provider (no /v1 for Anthropic), retries off, bb-forge for the forge', () => {
    const inv = piProvider.invocation({
      ...base,
      modelApi: { kind: 'anthropic', baseUrl: 'http://127.0.0.1:3129/anthropic' },
    });
    const models = JSON.parse(inv.files['.pi/agent/models.json']!) as {
      providers: { bb: { baseUrl: string; api: string; models: Array<{ id: string }> } };
    };
    expect(models.providers.bb).toMatchObject({
      baseUrl: 'http://127.0.0.1:3129/anthropic',
      api: 'anthropic-messages',
      models: [{ id: 'some-model' }],
    });
    expect(inv.cmd).toEqual(expect.arrayContaining(['--provider', 'bb', '--model', 'some-model']));
    expect(JSON.parse(inv.files['.pi/agent/settings.json']!)).toMatchObject({
      retry: { enabled: false },
    });
    expect(inv.env['BB_FORGE']).toBe('node /opt/bb/bb-forge.mjs');
  });

  it('keeps only a session id a CLI could have named: the agent prints what it likes', () => {
    for (const ok of ['c-41f2', '0199a2b3-7c1e-4d55-9a10-5b6c7d8e9f00', 'thread_01:ab.c'])
      expect(validSessionId(ok)).toBe(ok);
    for (const bad of [
      '',
      '-c',
      '--resume',
      'a b',
      'x'.repeat(129),
      '../../etc',
      'id\u001b[2J',
      undefined,
    ])
      expect(validSessionId(bad), String(bad)).toBeUndefined();
  });
});
