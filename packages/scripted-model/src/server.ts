import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { BbError } from '@bb/errors';
import { z } from 'zod';

/** A tool call the scripted model makes. Names are the CLI's own (`Bash`, `mcp__forge__signal_done`, `exec_command`, `bash`). */
export const ToolCallSchema = z
  .object({
    name: z.string().min(1),
    input: z.record(z.string(), z.unknown()).default({}),
    /** OpenAI Responses only: the namespace of an MCP tool, e.g. `mcp__forge` (Codex). */
    namespace: z.string().optional(),
  })
  .strict();
export type ToolCall = z.infer<typeof ToolCallSchema>;

/**
 * One model response. `say` alone ends the agent's turn; `tools` asks the CLI to
 * run tools and come back with their results. `fail` answers with that HTTP
 * status instead (every time this step is asked for, so retries fail too);
 * `cut` starts a streamed answer and drops the connection. `delayMs` waits first.
 */
export const ScriptStepSchema = z
  .object({
    say: z.string().optional(),
    tools: z.array(ToolCallSchema).optional(),
    fail: z.number().int().min(400).max(599).optional(),
    cut: z.literal(true).optional(),
    delayMs: z.number().int().min(0).max(600_000).optional(),
  })
  .strict()
  .refine((s) => s.say !== undefined || s.tools?.length || s.fail || s.cut, {
    message: 'a step needs say, tools, fail or cut',
  });
export type ScriptStep = z.input<typeof ScriptStepSchema>;
type Step = z.output<typeof ScriptStepSchema>;

export type ModelApi = 'anthropic-messages' | 'openai-responses' | 'openai-chat';

/** One request the server received, for assertions. */
export interface RecordedRequest {
  api: ModelApi;
  path: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
  /** The session the request belongs to (from the CLI's session headers), or `anonymous`. */
  session: string;
  /** Which script step answered it: the number of model responses already in its history. */
  step: number;
  stream: boolean;
  status: number;
}

export interface ScriptedModelOptions {
  /** The steps every conversation walks through, in order. */
  script: ScriptStep[];
  /** @default 127.0.0.1 */
  host?: string;
  /** @default 0 (any free port) */
  port?: number;
  /** The model name reported back. @default 'scripted-model' */
  model?: string;
}

export interface ScriptedModelServer {
  /** `http://127.0.0.1:PORT`: Anthropic clients use it as is; OpenAI clients append `/v1`. */
  url: string;
  readonly requests: RecordedRequest[];
  /** Replace the script for requests from now on. */
  setScript(script: ScriptStep[]): void;
  close(): Promise<void>;
}

const SESSION_HEADERS = ['x-claude-code-session-id', 'session-id', 'thread-id', 'session_id'];

/**
 * Which step answers a request: how many model responses its conversation
 * already holds. Stateless, so a CLI's retry of the same turn gets the same
 * answer, and a resumed session carries on where its history ends.
 */
export function stepIndex(api: ModelApi, body: Record<string, unknown>): number {
  if (api === 'openai-responses') {
    const input = Array.isArray(body['input'])
      ? (body['input'] as Array<Record<string, unknown>>)
      : [];
    let n = 0;
    let inRun = false;
    for (const item of input) {
      const fromModel =
        item['type'] === 'function_call' ||
        item['type'] === 'reasoning' ||
        (item['type'] === 'message' && item['role'] === 'assistant') ||
        (item['type'] === undefined && item['role'] === 'assistant');
      if (fromModel && !inRun) n++;
      inRun = fromModel;
    }
    return n;
  }
  const messages = Array.isArray(body['messages'])
    ? (body['messages'] as Array<Record<string, unknown>>)
    : [];
  return messages.filter((m) => m['role'] === 'assistant').length;
}

function sse(res: ServerResponse, events: Array<[string | undefined, unknown]>): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  for (const [event, data] of events)
    res.write(
      `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`,
    );
  res.end();
}

const usage = { input_tokens: 12, output_tokens: 7 };

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

function responses(step: Step, model: string, res: ServerResponse): void {
  const id = `resp_${randomUUID().replace(/-/g, '')}`;
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
          input_tokens: usage.input_tokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: usage.output_tokens,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: usage.input_tokens + usage.output_tokens,
        },
      },
    },
  ]);
  sse(res, events);
}

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
  const u = {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.input_tokens + usage.output_tokens,
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

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > 64 * 1024 * 1024) throw new BbError('INVALID_INPUT', 'request body over 64 MiB');
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  const v = JSON.parse(text || '{}') as unknown;
  if (!v || typeof v !== 'object' || Array.isArray(v))
    throw new BbError('INVALID_INPUT', 'the body must be a JSON object');
  return v as Record<string, unknown>;
}

function errorBody(api: ModelApi, status: number, message: string): string {
  return api === 'anthropic-messages'
    ? JSON.stringify({
        type: 'error',
        error: { type: status >= 500 ? 'api_error' : 'invalid_request_error', message },
      })
    : JSON.stringify({
        error: {
          message,
          type: status >= 500 ? 'server_error' : 'invalid_request_error',
          code: null,
        },
      });
}

/**
 * Start the scripted model API on loopback. It answers `POST /v1/messages`
 * (Anthropic, streamed or JSON), `POST /v1/responses` (OpenAI Responses, streamed)
 * and `POST /v1/chat/completions` (streamed or JSON); everything else is 404.
 */
export async function createScriptedModelServer(
  options: ScriptedModelOptions,
): Promise<ScriptedModelServer> {
  const parse = (s: ScriptStep[]) => z.array(ScriptStepSchema).parse(s);
  let script = parse(options.script);
  const model = options.model ?? 'scripted-model';
  const requests: RecordedRequest[] = [];
  const server: Server = createServer((req, res) => {
    void (async () => {
      const path = (req.url ?? '/').split('?')[0]!;
      const api: ModelApi | undefined =
        req.method !== 'POST'
          ? undefined
          : path === '/v1/messages'
            ? 'anthropic-messages'
            : path === '/v1/responses'
              ? 'openai-responses'
              : path === '/v1/chat/completions'
                ? 'openai-chat'
                : undefined;
      if (!api) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `no route ${req.method} ${path}` } }));
        return;
      }
      let body: Record<string, unknown>;
      try {
        body = await readJson(req);
      } catch (err) {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(errorBody(api, 400, (err as Error).message));
        return;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers))
        headers[k] = Array.isArray(v) ? v.join(', ') : (v ?? '');
      const session = SESSION_HEADERS.map((h) => headers[h]).find((v) => v) ?? 'anonymous';
      const index = stepIndex(api, body);
      const stream = body['stream'] === true;
      const step = script[index];
      const record: RecordedRequest = {
        api,
        path,
        headers,
        body,
        session,
        step: index,
        stream,
        status: 200,
      };
      requests.push(record);
      if (step?.delayMs) await new Promise((r) => setTimeout(r, step.delayMs));
      if (!step) {
        record.status = 500;
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(errorBody(api, 500, `the script has no step ${index} (it has ${script.length})`));
        return;
      }
      if (step.fail) {
        record.status = step.fail;
        res.writeHead(step.fail, { 'content-type': 'application/json' });
        res.end(errorBody(api, step.fail, `scripted failure ${step.fail}`));
        return;
      }
      if (step.cut) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(': the scripted model cuts this stream\n\n');
        setTimeout(() => res.socket?.destroy(), 10);
        return;
      }
      if (api === 'anthropic-messages') anthropic(step, model, stream, res);
      else if (api === 'openai-responses') responses(step, model, res);
      else chat(step, model, stream, res);
    })().catch((err) => {
      if (!res.headersSent) res.writeHead(500);
      res.end(String((err as Error).message));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const addr = server.address() as AddressInfo;
  return {
    url: `http://${addr.address}:${addr.port}`,
    requests,
    setScript(next) {
      script = parse(next);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
