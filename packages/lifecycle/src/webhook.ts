import { BbError, errorMessage, isBbError } from '@bb/errors';
import type { Forge, ForgeEvent } from '@bb/forge';
import type { DeliveryLedger } from '@bb/state';

export interface WebhookHandlerOptions {
  /** Verifies and parses this forge's deliveries. */
  forge: Pick<Forge, 'verifyWebhook' | 'parseWebhook'>;
  secret: string;
  /**
   * Durably accepts an event (the orchestrator's `accept`: ledger and inbox in
   * one write); `false` for a key accepted before; throws when it cannot be
   * stored (the delivery is then answered 503, never 202). Must return at once.
   */
  accept?: (event: ForgeEvent) => boolean;
  /** Without `accept`: the ledger that deduplicates, and who receives each new event. */
  ledger?: DeliveryLedger;
  enqueue?: (event: ForgeEvent) => void;
  /** Largest body accepted. @default 1 MiB (Gitea's payloads are tens of KB) */
  maxBytes?: number;
  log?: (entry: Record<string, unknown>) => void;
}

const reply = (status: number, body: Record<string, unknown>) =>
  new Response(`${JSON.stringify(body)}\n`, {
    status,
    headers: { 'content-type': 'application/json' },
  });

async function readCapped(req: Request, max: number): Promise<Uint8Array | undefined> {
  if (!req.body) return new Uint8Array(0);
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

/**
 * The webhook endpoint, in the order that keeps it cheap and safe: size and
 * content type first (413 / 415, nothing buffered), then the signature over the
 * raw bytes (401 before any parse or write), then parse (400), then one
 * durable write under the event's semantic key (a duplicate is acknowledged and
 * not processed again; a store that cannot be written is 503, never 202), then
 * 202. Nothing slow happens before the answer: Gitea gives up after 5 s and never
 * retries.
 */
export function createWebhookHandler(
  options: WebhookHandlerOptions,
): (req: Request) => Promise<Response> {
  const max = options.maxBytes ?? 1024 * 1024;
  const log = options.log ?? (() => {});
  const { ledger, enqueue } = options;
  const accept =
    options.accept ??
    (ledger && enqueue
      ? (event: ForgeEvent) => {
          const isNew = ledger.recordDelivery(event.key, {
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
  return async (req) => {
    if (req.method !== 'POST') return reply(405, { error: 'use POST' });
    const declared = Number(req.headers.get('content-length') ?? 0);
    if (declared > max) return reply(413, { error: `body over ${max} bytes` });
    const type = req.headers.get('content-type') ?? '';
    if (!/^application\/json\b/i.test(type))
      return reply(415, {
        error: `content type ${type || '(none)'} is not application/json: set the hook's content type to json`,
      });
    const raw = await readCapped(req, max);
    if (!raw) return reply(413, { error: `body over ${max} bytes` });
    if (!options.forge.verifyWebhook(req.headers, raw, options.secret)) {
      log({ msg: 'webhook signature rejected', delivery: req.headers.get('x-gitea-delivery') });
      return reply(401, { error: 'signature does not verify' });
    }
    let event: ReturnType<Forge['parseWebhook']>;
    try {
      event = options.forge.parseWebhook(req.headers, raw);
    } catch (err) {
      if (isBbError(err, 'INVALID_INPUT')) return reply(400, { error: errorMessage(err) });
      throw err;
    }
    if (event.kind === 'ignored') {
      log({ msg: 'webhook ignored', reason: event.reason, delivery: event.deliveryId });
      return reply(202, { ignored: event.reason });
    }
    let isNew: boolean;
    try {
      isNew = accept(event);
    } catch (err) {
      log({ msg: 'delivery ledger unavailable', error: errorMessage(err) });
      return reply(503, { error: 'cannot record the delivery right now; it was not accepted' });
    }
    if (!isNew) {
      log({ msg: 'duplicate delivery', key: event.key, delivery: event.deliveryId });
      return reply(202, { duplicate: true, key: event.key });
    }
    return reply(202, { accepted: true, key: event.key });
  };
}
