import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Step } from '../script';
import type { Dialect } from './dialect';
import { sse, usageOf } from './sse';

function anthropic(step: Step, model: string, stream: boolean, res: ServerResponse): void {
  const id = `msg_${randomUUID().replace(/-/g, '').slice(0, 24)}`;
  const blocks: Array<Record<string, unknown>> = [];
  if (step.say !== undefined) blocks.push({ type: 'text', text: step.say });
  for (const t of step.tools ?? [])
    blocks.push({
      type: 'tool_use',
      id: `toolu_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
      name: t.name,
      input: t.input,
    });
  const stop = step.tools?.length ? 'tool_use' : 'end_turn';
  const u = usageOf(step);
  const usage = {
    input_tokens: u.input,
    cache_creation_input_tokens: u.cacheWrite,
    cache_read_input_tokens: u.cacheRead,
    output_tokens: u.output,
  };
  if (!stream) {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: blocks,
        stop_reason: stop,
        stop_sequence: null,
        usage,
      }),
    );
    return;
  }
  const events: Array<[string, unknown]> = [
    [
      'message_start',
      {
        type: 'message_start',
        message: {
          id,
          type: 'message',
          role: 'assistant',
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { ...usage, output_tokens: 1 },
        },
      },
    ],
  ];
  blocks.forEach((b, index) => {
    const start = b['type'] === 'text' ? { type: 'text', text: '' } : { ...b, input: {} };
    events.push([
      'content_block_start',
      { type: 'content_block_start', index, content_block: start },
    ]);
    events.push([
      'content_block_delta',
      {
        type: 'content_block_delta',
        index,
        delta:
          b['type'] === 'text'
            ? { type: 'text_delta', text: b['text'] }
            : { type: 'input_json_delta', partial_json: JSON.stringify(b['input']) },
      },
    ]);
    events.push(['content_block_stop', { type: 'content_block_stop', index }]);
  });
  events.push([
    'message_delta',
    {
      type: 'message_delta',
      delta: { stop_reason: stop, stop_sequence: null },
      usage: { output_tokens: usage.output_tokens },
    },
  ]);
  events.push(['message_stop', { type: 'message_stop' }]);
  sse(res, events);
}

function anthropicError(status: number, message: string): string {
  return JSON.stringify({
    type: 'error',
    error: { type: status >= 500 ? 'api_error' : 'invalid_request_error', message },
  });
}

/** Anthropic Messages, streamed or plain JSON. */
export const anthropicDialect: Dialect = {
  api: 'anthropic-messages',
  path: '/v1/messages',
  answer: (step, model, stream, res) => anthropic(step, model, stream, res),
  errorBody: (status, message) => anthropicError(status, message),
};
