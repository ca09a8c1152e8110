import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Step } from '../script';
import { type Dialect, openAiError } from './dialect';
import { sse, usageOf } from './sse';

function chat(step: Step, model: string, stream: boolean, res: ServerResponse): void {
  const id = `chatcmpl-${randomUUID().replace(/-/g, '').slice(0, 24)}`;
  const created = Math.floor(Date.now() / 1000);
  const calls = (step.tools ?? []).map((t, index) => ({
    index,
    id: `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
    type: 'function',
    function: { name: t.name, arguments: JSON.stringify(t.input) },
  }));
  const finish = calls.length ? 'tool_calls' : 'stop';
  const t = usageOf(step);
  // OpenAI counts cached input tokens within the prompt tokens.
  const u = {
    prompt_tokens: t.input + t.cacheRead,
    completion_tokens: t.output,
    total_tokens: t.input + t.cacheRead + t.output,
    prompt_tokens_details: { cached_tokens: t.cacheRead },
  };
  if (!stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [
          {
            index: 0,
            message: {
              role: 'assistant',
              content: step.say ?? null,
              ...(calls.length ? { tool_calls: calls.map(({ index: _i, ...c }) => c) } : {}),
            },
            finish_reason: finish,
          },
        ],
        usage: u,
      }),
    );
    return;
  }
  const chunk = (delta: unknown, finish_reason: string | null) => ({
    id,
    object: 'chat.completion.chunk',
    created,
    model,
    choices: [{ index: 0, delta, finish_reason }],
  });
  const events: Array<[undefined, unknown]> = [
    [undefined, chunk({ role: 'assistant', content: '' }, null)],
  ];
  if (step.say !== undefined) events.push([undefined, chunk({ content: step.say }, null)]);
  if (calls.length) events.push([undefined, chunk({ tool_calls: calls }, null)]);
  events.push([undefined, chunk({}, finish)]);
  events.push([
    undefined,
    { id, object: 'chat.completion.chunk', created, model, choices: [], usage: u },
  ]);
  events.push([undefined, '[DONE]']);
  sse(res, events);
}

/** OpenAI Chat Completions, streamed or plain JSON. */
export const chatDialect: Dialect = {
  api: 'openai-chat',
  path: '/v1/chat/completions',
  answer: (step, model, stream, res) => chat(step, model, stream, res),
  errorBody: (status, message) => openAiError(status, message),
};
