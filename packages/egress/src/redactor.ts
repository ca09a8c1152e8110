import { Transform, type TransformCallback } from 'node:stream';

const MARK = '[REDACTED]';

/**
 * A stream that replaces every occurrence of the given secrets with
 * `[REDACTED]`, including one split across chunks. It holds back only a tail
 * that could still be the start of a secret, so a streamed answer (server-sent
 * events) is not delayed.
 */
export class SecretRedactor extends Transform {
  readonly #secrets: string[];
  #held = '';

  constructor(secrets: string[]) {
    super();
    // Bytes as latin1 characters: one per byte, so any body passes through unchanged.
    this.#secrets = secrets
      .filter((s) => s.length > 0)
      .map((s) => Buffer.from(s).toString('latin1'));
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    let text = redactAll(this.#held + chunk.toString('latin1'), this.#secrets);
    let keep = 0;
    for (const s of this.#secrets)
      for (let n = Math.min(s.length - 1, text.length); n > keep; n--)
        if (text.endsWith(s.slice(0, n))) {
          keep = n;
          break;
        }
    this.#held = text.slice(text.length - keep);
    text = text.slice(0, text.length - keep);
    if (text) this.push(Buffer.from(text, 'latin1'));
    done();
  }

  override _flush(done: TransformCallback): void {
    if (this.#held) this.push(Buffer.from(this.#held, 'latin1'));
    done();
  }
}

function redactAll(text: string, secrets: string[]): string {
  let out = text;
  for (const s of secrets) if (out.includes(s)) out = out.split(s).join(MARK);
  return out;
}

/** Header values with every secret replaced. */
export function redactHeaders<T extends Record<string, unknown>>(headers: T, secrets: string[]): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(headers)) {
    const fix = (x: unknown) => (typeof x === 'string' ? redactAll(x, secrets) : x);
    out[k] = Array.isArray(v) ? v.map(fix) : fix(v);
  }
  return out as T;
}
