/**
 * What a model response says it cost, read by the credential proxy as the
 * answer goes back to the bottle. The upstream (the model API) says it, not
 * the agent: an agent can print any usage it likes, but it cannot change what
 * the API answered. Anthropic Messages, OpenAI Responses and OpenAI Chat
 * Completions are understood, streamed (server-sent events) or whole.
 */

/** Tokens one model response used. `input` never includes the cached tokens. */
export interface ModelUsage {
  /** The model the upstream said answered (at most 64 characters). */
  model?: string;
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  /**
   * False when the response did not say what it used in full (a stream cut
   * short, usage turned off): the missing figures are counted from its bytes,
   * four to a token, so hiding usage never lowers the count.
   */
  reported: boolean;
}

/** A whole JSON answer is read up to this size; past it the bytes are counted instead. */
const JSON_MAX = 2 * 1024 * 1024;
/** One server-sent-event line is read up to this size (content deltas are small). */
const LINE_MAX = 1024 * 1024;
const BYTES_PER_TOKEN = 4;
const NL = 0x0a;
const EMPTY = Buffer.alloc(0);
const USAGE_KEY = Buffer.from('"usage"');
const USAGE_TEXT = '"usage"';

type Obj = Record<string, unknown>;
type Counts = Omit<ModelUsage, 'model' | 'reported'>;
const obj = (v: unknown): Obj | undefined =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Obj) : undefined;
const num = (v: unknown): number =>
  typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : 0;

/**
 * Follows one response body. Feed it every chunk as it passes (it never
 * changes one); `result` says what the response used once it ended.
 */
export class UsageMeter {
  readonly #sse: boolean;
  #tail: Buffer = EMPTY;
  #skipLine = false;
  #json: Buffer[] = [];
  #jsonBytes = 0;
  #model: string | undefined;
  #u: Counts = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 };
  #seen = false;
  #final = false;

  constructor(contentType: string | undefined) {
    this.#sse = /^\s*text\/event-stream/i.test(contentType ?? '');
  }

  feed(chunk: Buffer): void {
    if (!this.#sse) {
      this.#jsonBytes += chunk.length;
      if (this.#jsonBytes <= JSON_MAX) this.#json.push(chunk);
      else this.#json = [];
      return;
    }
    let start = 0;
    if (this.#skipLine) {
      // The rest of a line too long to read: up to its end, nothing is looked at.
      const nl = chunk.indexOf(NL);
      if (nl < 0) return;
      start = nl + 1;
      this.#skipLine = false;
    } else if (this.#tail.length > 0) {
      // The line the last chunk left open ends in this one: only it is joined.
      const nl = chunk.indexOf(NL);
      if (nl < 0) {
        this.#keep(Buffer.concat([this.#tail, chunk]));
        return;
      }
      const line = Buffer.concat([this.#tail, chunk.subarray(0, nl)]);
      this.#tail = EMPTY;
      if (line.length <= LINE_MAX && line.indexOf(USAGE_KEY) >= 0)
        this.#event(line.toString('utf8'));
      start = nl + 1;
    }
    const last = chunk.lastIndexOf(NL);
    if (last < start) {
      this.#keep(chunk.subarray(start));
      return;
    }
    // Only a line that names a usage can tell one (and each that does names its model):
    // it is found in the bytes, and the text deltas between are never decoded or parsed.
    // (Searched as Latin-1 text, a byte a character: far quicker than a Buffer's search.)
    const bytes = chunk.toString('latin1', 0, last);
    let at = bytes.indexOf(USAGE_TEXT, start);
    while (at >= 0) {
      const from = Math.max(start, bytes.lastIndexOf('\n', at) + 1);
      const found = bytes.indexOf('\n', at);
      const end = found < 0 ? last : found;
      if (end - from <= LINE_MAX) this.#event(chunk.toString('utf8', from, end));
      at = bytes.indexOf(USAGE_TEXT, end);
    }
    this.#keep(chunk.subarray(last + 1));
  }

  /** Keep the start of a line that has not ended yet (a copy: the chunk is not held). */
  #keep(rest: Buffer): void {
    if (rest.length > LINE_MAX) {
      this.#tail = EMPTY;
      this.#skipLine = true;
    } else this.#tail = rest.length ? Buffer.from(rest) : EMPTY;
  }

  #event(line: string): void {
    const m = /^data:\s?(.*?)\r?$/.exec(line);
    if (!m?.[1]?.startsWith('{')) return;
    try {
      this.#observe(JSON.parse(m[1]));
    } catch {
      // not JSON: nothing to read
    }
  }

  #observe(value: unknown): void {
    const o = obj(value);
    if (!o) return;
    const message = obj(o['message']);
    const response = obj(o['response']);
    const model = [o['model'], message?.['model'], response?.['model']].find(
      (m): m is string => typeof m === 'string' && m.length > 0,
    );
    if (model && !this.#model) this.#model = model.slice(0, 64);
    for (const u of [obj(o['usage']), obj(message?.['usage']), obj(response?.['usage'])]) {
      if (!u) continue;
      this.#seen = true;
      // Anthropic's message_start tells the input; the output comes in message_delta.
      if (o['type'] !== 'message_start') this.#final = true;
      this.#take(u);
    }
  }

  #take(u: Obj): void {
    const openai = 'total_tokens' in u || 'prompt_tokens' in u;
    let next: Counts;
    if (openai) {
      // OpenAI counts the cached input tokens within the input ones.
      const input = num(u['input_tokens'] ?? u['prompt_tokens']);
      const details = obj(u['input_tokens_details'] ?? u['prompt_tokens_details']);
      const cached = Math.min(num(details?.['cached_tokens']), input);
      next = {
        input: input - cached,
        output: num(u['output_tokens'] ?? u['completion_tokens']),
        cacheRead: cached,
        cacheWrite: 0,
      };
    } else
      next = {
        input: num(u['input_tokens']),
        output: num(u['output_tokens']),
        cacheRead: num(u['cache_read_input_tokens']),
        cacheWrite: num(u['cache_creation_input_tokens']),
      };
    // Streamed figures are running totals: the largest seen is the answer's.
    for (const k of ['input', 'output', 'cacheRead', 'cacheWrite'] as const)
      this.#u[k] = Math.max(this.#u[k], next[k]);
  }

  /**
   * What the response used, once it ended. `generated` says whether it was a
   * model's answer (a POST answered 2xx): one that did not say in full is
   * counted from its bytes. Undefined for anything else that said nothing.
   */
  result(bytes: { up: number; down: number; generated: boolean }): ModelUsage | undefined {
    if (!this.#sse && this.#json.length) {
      try {
        this.#observe(JSON.parse(Buffer.concat(this.#json).toString('utf8')));
      } catch {
        // not JSON: counted from its bytes below
      }
      this.#json = [];
    }
    if (!bytes.generated && !this.#seen) return undefined;
    const u = { ...this.#u };
    const reported = this.#seen && this.#final;
    if (bytes.generated && !reported) {
      u.output = Math.max(u.output, Math.ceil(bytes.down / BYTES_PER_TOKEN));
      if (!this.#seen) u.input = Math.ceil(bytes.up / BYTES_PER_TOKEN);
    }
    return { ...(this.#model ? { model: this.#model } : {}), ...u, reported };
  }
}
