import type { IncomingMessage, ServerResponse } from 'node:http';
import { BbError, errorMessage, isBbError } from '@bb/errors';
import {
  type ForgeEvent,
  header,
  type ParsedWebhook,
  type WebhookHeaders,
  type WebhookScheme,
} from '@bb/forge';
import type { DeliveryLedger } from '@bb/state';

export interface WebhookHandlerOptions {
  /** The forge kind's webhooks: how deliveries are verified and read (`kind.webhook`). */
  scheme: Pick<WebhookScheme, 'verify' | 'parse' | 'deliveryId'>;
  /** The secrets deliveries may be signed with: the current one, and old ones while it changes. */
  secrets: readonly string[];
  /**
   * Durably accepts an event (the orchestrator's `accept`: ledger and inbox in
   * one write); `false` for a key accepted before; throws when it cannot be
   * stored (the delivery is then answered 503, never 202). Resolves once the
   * event is durable; handling it must not be awaited here.
   */
  accept?: (event: ForgeEvent) => boolean | Promise<boolean>;
  /** Without `accept`: the ledger that deduplicates, and who receives each new event. */
  ledger?: DeliveryLedger;
  enqueue?: (event: ForgeEvent) => void;
  /** Largest body accepted. @default 1 MiB (forges' payloads are tens of KB) */
  maxBytes?: number;
  log?: (entry: Record<string, unknown>) => void;
}

/** What the endpoint answers: a status and a small JSON body. */
export interface DeliveryAnswer {
  status: number;
  body: Record<string, unknown>;
}

const answer = (status: number, body: Record<string, unknown>): DeliveryAnswer => ({
  status,
  body,
});

/**
 * The endpoint's decisions, with no HTTP objects: `before` looks at the method
 * and headers (405 / 413 / 415, nothing buffered), `deliver` at the raw bytes
 * (401 before any parse or write, 400, one durable write, 202 or 503).
 */
function deliveryCore(options: WebhookHandlerOptions) {
  const max = options.maxBytes ?? 1024 * 1024;
  const log = options.log ?? (() => {});
  const { ledger, enqueue } = options;
  const accept =
    options.accept ??
    (ledger && enqueue
      ? async (event: ForgeEvent) => {
          const isNew = await ledger.recordDelivery(event.key, {
            deliveryId: event.deliveryId,
            event: event.kind,
          });
          if (isNew) enqueue(event);
          return isNew;
        }
      : undefined);
  if (!accept)
    throw new BbError(
      'INVALID_INPUT',
      'createWebhookHandler needs `accept`, or both `ledger` and `enqueue`',
    );
  // An empty secret never verifies, whatever the scheme does with it; none at all is refused.
  const secrets = options.secrets.filter((s) => typeof s === 'string' && s.length > 0);
  if (secrets.length === 0)
    throw new BbError('INVALID_INPUT', 'the webhook endpoint needs at least one non-empty secret');
  const tooBig = answer(413, { error: `body over ${max} bytes` });
  return {
    max,
    tooBig,
    before(method: string | undefined, headers: WebhookHeaders): DeliveryAnswer | undefined {
      if (method !== 'POST') return answer(405, { error: 'use POST' });
      const declared = Number(header(headers, 'content-length') ?? 0);
      if (declared > max) return tooBig;
      const type = header(headers, 'content-type') ?? '';
      if (!/^application\/json\b/i.test(type))
        return answer(415, {
          error: `content type ${type || '(none)'} is not application/json: set the hook's content type to json`,
        });
      return undefined;
    },
    async deliver(headers: WebhookHeaders, raw: Uint8Array): Promise<DeliveryAnswer> {
      if (!options.scheme.verify(headers, raw, secrets)) {
        log({ msg: 'webhook signature rejected', delivery: options.scheme.deliveryId(headers) });
        return answer(401, { error: 'signature does not verify' });
      }
      let event: ParsedWebhook;
      try {
        event = options.scheme.parse(headers, raw);
      } catch (err) {
        if (isBbError(err, 'INVALID_INPUT')) return answer(400, { error: errorMessage(err) });
        throw err;
      }
      if (event.kind === 'ignored') {
        log({ msg: 'webhook ignored', reason: event.reason, delivery: event.deliveryId });
        return answer(202, { ignored: event.reason });
      }
      let isNew: boolean;
      try {
        isNew = await accept(event);
      } catch (err) {
        log({ msg: 'delivery ledger unavailable', error: errorMessage(err) });
        return answer(503, { error: 'cannot record the delivery right now; it was not accepted' });
      }
      if (!isNew) {
        log({ msg: 'duplicate delivery', key: event.key, delivery: event.deliveryId });
        return answer(202, { duplicate: true, key: event.key });
      }
      return answer(202, { accepted: true, key: event.key });
    },
  };
}

const toResponse = (a: DeliveryAnswer) =>
  new Response(`${JSON.stringify(a.body)}\n`, {
    status: a.status,
    headers: { 'content-type': 'application/json' },
  });

/**
 * A body read piece by piece into storage of its own, up to `max` bytes. Each
 * piece is copied at once: keeping the pieces would keep the socket buffers
 * they are cut from, so a body sent one byte at a time would hold far more
 * memory than its size (a few MB sent so took hundreds of MB). Sized from the
 * declared length when there is one, else grown by doubling.
 */
class BodyCollector {
  #buf: Buffer;
  #size = 0;
  constructor(
    readonly max: number,
    declared: number | undefined,
  ) {
    // Never more than 64 KiB before the bytes arrive, whatever is declared.
    this.#buf = Buffer.allocUnsafe(Math.min(max, declared ?? 16 * 1024, 64 * 1024));
  }

  /** Take a piece; `false` once the body is over `max` (nothing more is kept). */
  push(piece: Uint8Array): boolean {
    const size = this.#size + piece.byteLength;
    if (size > this.max) return false;
    if (size > this.#buf.length) {
      const grown = Buffer.allocUnsafe(Math.min(this.max, Math.max(size, this.#buf.length * 2)));
      this.#buf.copy(grown, 0, 0, this.#size);
      this.#buf = grown;
    }
    this.#buf.set(piece, this.#size);
    this.#size = size;
    return true;
  }

  bytes(): Buffer {
    return this.#buf.subarray(0, this.#size);
  }
}

const declaredLength = (v: string | null | undefined): number | undefined =>
  v != null && /^\d+$/.test(v) ? Number(v) : undefined;

/** The body, or `undefined` when it is over `max` bytes (reading stops there). */
async function readCapped(req: Request, max: number): Promise<Uint8Array | undefined> {
  if (!req.body) return new Uint8Array(0);
  const body = new BodyCollector(max, declaredLength(req.headers.get('content-length')));
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return body.bytes();
    if (!body.push(value)) {
      await reader.cancel();
      return undefined;
    }
  }
}

/**
 * The webhook endpoint, in the order that keeps it cheap and safe: size and
 * content type first (413 / 415, nothing buffered), then the signature over the
 * raw bytes (401 before any parse or write), then parse (400), then one
 * durable write under the event's semantic key (a duplicate is acknowledged and
 * not processed again; a store that cannot be written is 503, never 202), then
 * 202. Nothing slow happens before the answer: a forge gives up soon (within seconds) and never
 * retries.
 */
export function createWebhookHandler(
  options: WebhookHandlerOptions,
): (req: Request) => Promise<Response> {
  const core = deliveryCore(options);
  return async (req) => {
    const early = core.before(req.method, req.headers);
    if (early) return toResponse(early);
    const raw = await readCapped(req, core.max);
    if (!raw) return toResponse(core.tooBig);
    return toResponse(await core.deliver(req.headers, raw));
  };
}

/**
 * The same endpoint as a node:http listener, for the server that takes the
 * deliveries: the body is read straight from the socket (capped at `maxBytes`,
 * the connection dropped past it) and no `Request`/`Response` is built, which
 * is a quarter of the cost of a delivery. A failure it did not expect is 500.
 */
export function createWebhookListener(
  options: WebhookHandlerOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  const core = deliveryCore(options);
  const send = (res: ServerResponse, a: DeliveryAnswer) => {
    if (res.headersSent) return;
    res
      .writeHead(a.status, { 'content-type': 'application/json' })
      .end(`${JSON.stringify(a.body)}\n`);
  };
  // The answer goes out at once; the rest of the body is read and dropped
  // (closing on unread bytes would reset the answer away) for at most a
  // second, then the connection is cut.
  const dropRest = (req: IncomingMessage, res: ServerResponse) => {
    res.setHeader('connection', 'close');
    req.resume();
    const cut = setTimeout(() => req.destroy(), 1000);
    cut.unref();
    req.once('close', () => clearTimeout(cut));
  };
  return (req, res) => {
    const early = core.before(req.method, req.headers);
    if (early) {
      dropRest(req, res);
      send(res, early);
      return;
    }
    const body = new BodyCollector(core.max, declaredLength(req.headers['content-length']));
    let over = false;
    const onData = (piece: Buffer) => {
      if (body.push(piece)) return;
      over = true;
      req.off('data', onData);
      dropRest(req, res);
      send(res, core.tooBig);
    };
    req.on('data', onData);
    req.on('error', () => {});
    req.on('end', () => {
      if (over) return;
      core.deliver(req.headers, body.bytes()).then(
        (a) => send(res, a),
        () => send(res, answer(500, { error: 'internal error' })),
      );
    });
  };
}
