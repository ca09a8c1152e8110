import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { Step } from '../script';
import { type Dialect, openAiError } from './dialect';
import { sse, usageOf } from './sse';

function responses(step: Step, model: string, res: ServerResponse): void {
  const id = `resp_${randomUUID().replace(/-/g, '')}`;
  const u = usageOf(step);
  const items: Array<Record<string, unknown>> = [];
  if (step.say !== undefined)
    items.push({
      type: 'message',
      id: `msg_${randomUUID().replace(/-/g, '')}`,
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: step.say, annotations: [] }],
    });
  for (const t of step.tools ?? [])
    items.push({
      type: 'function_call',
      id: `fc_${randomUUID().replace(/-/g, '')}`,
      call_id: `call_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
      name: t.name,
      ...(t.namespace ? { namespace: t.namespace } : {}),
      arguments: JSON.stringify(t.input),
      status: 'completed',
    });
  const response = {
    id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model,
    status: 'in_progress',
    output: [] as unknown[],
  };
  const events: Array<[string, unknown]> = [
    ['response.created', { type: 'response.created', response }],
  ];
  items.forEach((item, output_index) => {
    events.push([
      'response.output_item.added',
      {
        type: 'response.output_item.added',
        output_index,
        item: { ...item, status: 'in_progress' },
      },
    ]);
    events.push([
      'response.output_item.done',
      { type: 'response.output_item.done', output_index, item },
    ]);
  });
  events.push([
    'response.completed',
    {
      type: 'response.completed',
      response: {
        ...response,
        status: 'completed',
        output: items,
        usage: {
          input_tokens: u.input + u.cacheRead,
          input_tokens_details: { cached_tokens: u.cacheRead },
          output_tokens: u.output,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: u.input + u.cacheRead + u.output,
        },
      },
    },
  ]);
  sse(res, events);
}

/** OpenAI Responses, streamed. */
export const responsesDialect: Dialect = {
  api: 'openai-responses',
  path: '/v1/responses',
  answer: (step, model, _stream, res) => responses(step, model, res),
  errorBody: (status, message) => openAiError(status, message),
};
