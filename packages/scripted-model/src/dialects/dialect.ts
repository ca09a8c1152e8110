import type { ServerResponse } from 'node:http';
import type { ModelApi, Step } from '../script';

/** One model API the scripted model speaks: where it is asked, how it answers, how it refuses. */
export interface Dialect {
  api: ModelApi;
  /** The `POST` path it answers. */
  path: string;
  /** Answer with `step` (streamed when the request asked for it and the API can). */
  answer(step: Step, model: string, stream: boolean, res: ServerResponse): void;
  /** An error body in the API's own shape. */
  errorBody(status: number, message: string): string;
}

/** OpenAI's error body (Responses and Chat Completions share it). */
export function openAiError(status: number, message: string): string {
  return JSON.stringify({
    error: { message, type: status >= 500 ? 'server_error' : 'invalid_request_error', code: null },
  });
}
