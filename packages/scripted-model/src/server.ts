import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { BbError } from '@bb/errors';
import { z } from 'zod';
import { DIALECTS } from './dialects/index';
import { type ModelApi, type RecordedRequest, type ScriptStep, ScriptStepSchema } from './script';

export {
  type ModelApi,
  type RecordedRequest,
  type ScriptStep,
  ScriptStepSchema,
  type ToolCall,
  ToolCallSchema,
} from './script';

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
      const dialect = req.method === 'POST' ? DIALECTS.find((d) => d.path === path) : undefined;
      if (!dialect) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: `no route ${req.method} ${path}` } }));
        return;
      }
      let body: Record<string, unknown>;
      try {
        body = await readJson(req);
      } catch (err) {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(dialect.errorBody(400, (err as Error).message));
        return;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers))
        headers[k] = Array.isArray(v) ? v.join(', ') : (v ?? '');
      const session = SESSION_HEADERS.map((h) => headers[h]).find((v) => v) ?? 'anonymous';
      const { api } = dialect;
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
        res.end(
          dialect.errorBody(500, `the script has no step ${index} (it has ${script.length})`),
        );
        return;
      }
      if (step.fail) {
        record.status = step.fail;
        res.writeHead(step.fail, { 'content-type': 'application/json' });
        res.end(dialect.errorBody(step.fail, `scripted failure ${step.fail}`));
        return;
      }
      if (step.cut) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(': the scripted model cuts this stream\n\n');
        setTimeout(() => res.socket?.destroy(), 10);
        return;
      }
      dialect.answer(step, model, stream, res);
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
