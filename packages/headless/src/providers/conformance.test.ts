// The built-in providers pass the suite every provider must pass, on output
// recorded from the real CLIs (the shapes docs/agent-clis.md describes).
import { describe, expect, it } from 'vitest';
import {
  claudeProvider,
  codexProvider,
  piProvider,
  providerFor,
  providerNames,
  scriptProvider,
} from './index';
import { describeProviderConformance } from './suite';

const lines = (...objects: unknown[]) => `${objects.map((o) => JSON.stringify(o)).join('\n')}\n`;

describeProviderConformance('claude', {
  provider: claudeProvider,
  recorded: {
    stdout: lines(
      { type: 'system', subtype: 'init', session_id: 'c-41f2' },
      {
        type: 'result',
        subtype: 'success',
        is_error: false,
        session_id: 'c-41f2',
        result: 'Opened the PR.',
        usage: {
          input_tokens: 12,
          cache_creation_input_tokens: 300,
          cache_read_input_tokens: 4000,
          output_tokens: 99,
        },
      },
    ),
    exitCode: 0,
    sessionId: 'c-41f2',
    tokens: 4312,
  },
  failed: {
    stdout: lines({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      session_id: 'c-41f2',
    }),
    exitCode: 1,
  },
  // Stopped (SIGTERM) after it began: the init line named the session.
  stopped: {
    stdout: lines(
      { type: 'system', subtype: 'init', session_id: 'c-41f2', model: 'scripted-model' },
      { type: 'assistant', message: { content: [{ type: 'text', text: 'Looking…' }] } },
    ),
    exitCode: 143,
    sessionId: 'c-41f2',
  },
});

describeProviderConformance('codex', {
  provider: codexProvider,
  recorded: {
    stdout: lines(
      { type: 'thread.started', thread_id: '0199a2b3-t' },
      { type: 'turn.started' },
      { type: 'item.completed', item: { id: 'i0', type: 'agent_message', text: 'done' } },
      {
        type: 'turn.completed',
        usage: { input_tokens: 900, cached_input_tokens: 800, output_tokens: 20 },
      },
    ),
    exitCode: 0,
    sessionId: '0199a2b3-t',
    tokens: 900,
  },
  failed: {
    stdout: lines(
      { type: 'thread.started', thread_id: '0199a2b3-t' },
      { type: 'turn.failed', error: { message: 'stream disconnected' } },
    ),
    exitCode: 1,
  },
  stopped: {
    stdout: lines({ type: 'thread.started', thread_id: '0199a2b3-t' }, { type: 'turn.started' }),
    exitCode: 143,
    sessionId: '0199a2b3-t',
  },
});

describeProviderConformance('pi', {
  provider: piProvider,
  recorded: {
    stdout: lines(
      {
        type: 'session',
        version: 3,
        id: '01970f5e-p',
        timestamp: '2026-11-28T07:00:00Z',
        cwd: '/workspace',
      },
      { type: 'agent_start' },
      {
        type: 'message_end',
        message: {
          role: 'assistant',
          stopReason: 'stop',
          usage: { input: 40, output: 12, cacheRead: 600, cacheWrite: 60, totalTokens: 712 },
        },
      },
      { type: 'agent_end', messages: [] },
    ),
    exitCode: 0,
    sessionId: '01970f5e-p',
    tokens: 700,
  },
  // pi exits 0 when the model API fails: its events say so.
  failed: {
    stdout: lines(
      { type: 'session', version: 3, id: '01970f5e-p' },
      {
        type: 'message_end',
        message: { role: 'assistant', stopReason: 'error', errorMessage: '500' },
      },
    ),
    exitCode: 0,
  },
  stopped: {
    stdout: lines({ type: 'session', version: 3, id: '01970f5e-p' }, { type: 'agent_start' }),
    exitCode: 143,
    sessionId: '01970f5e-p',
  },
});

describeProviderConformance('script', {
  provider: scriptProvider,
  recorded: {
    stdout: lines({ type: 'result', session_id: 's-9', usage: { input_tokens: 7 } }),
    exitCode: 0,
    sessionId: 's-9',
    tokens: 7,
  },
  stopped: {
    stdout: lines({ type: 'turn', session_id: 's-9', turn: 1, previous_prompts: [] }),
    exitCode: 143,
    sessionId: 's-9',
  },
});

describe('the provider registry', () => {
  it('has the built-ins by name, and names them when asked for another', () => {
    expect(providerNames()).toEqual(['claude', 'codex', 'pi', 'script']);
    expect(providerFor('pi')).toBe(piProvider);
    expect(() => providerFor('gpt-shell')).toThrow(/use claude, codex, pi or script/);
  });
});
