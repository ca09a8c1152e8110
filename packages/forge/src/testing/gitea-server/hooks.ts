import { createHmac, randomUUID } from 'node:crypto';
import { request } from 'undici';
import type { HookModel } from './model';
import { encodePayloadJson } from './shapes';

/** One attempt to deliver a webhook, as Gitea records it. */
export interface Delivery {
  uuid: string;
  hookId: number;
  url: string;
  event: string;
  eventType: string;
  body: string;
  headers: Record<string, string>;
  /** HTTP status, or undefined when the request failed. */
  status: number | undefined;
  error: string | undefined;
  deliveredAt: string;
}

// Which hook `events` entries enable which event types (Gitea's HasEvent rules).
function enabled(hook: HookModel, eventType: string): boolean {
  const events = hook.events.length === 0 ? ['push'] : hook.events;
  if (events.includes(eventType)) return true;
  if (eventType.startsWith('issue') && events.includes('issues')) return true;
  if (eventType.startsWith('pull_request') && events.includes('pull_request')) return true;
  return false;
}

/** Gitea's `Event()` mapping from a hook event type to the X-Gitea-Event header. */
export function eventHeader(eventType: string): string {
  if (eventType.startsWith('issue_') && eventType !== 'issue_comment') return 'issues';
  if (eventType === 'issue_comment' || eventType === 'pull_request_comment') return 'issue_comment';
  if (eventType === 'pull_request_review_approved') return 'pull_request_approved';
  if (eventType === 'pull_request_review_rejected') return 'pull_request_rejected';
  if (eventType === 'pull_request_review_comment') return 'pull_request_comment';
  if (eventType.startsWith('pull_request')) return 'pull_request';
  return eventType;
}

/** Sends webhooks the way Gitea does: one attempt, 5 s timeout, no retry. */
export class HookSender {
  readonly deliveries: Delivery[] = [];
  readonly #pending = new Set<Promise<void>>();
  #listeners: Array<(d: Delivery) => void> = [];

  constructor(readonly timeoutMs = 5000) {}

  /** Queue deliveries of one payload to every enabled hook. Returns immediately. */
  send(hooks: HookModel[], eventType: string, payload: unknown): void {
    const body = encodePayloadJson(payload);
    for (const hook of hooks) {
      if (!hook.active || !enabled(hook, eventType)) continue;
      this.#track(this.#deliver(hook, eventType, body, randomUUID()));
    }
  }

  /** Deliver a recorded delivery again with a new UUID, like Gitea's "Replay". */
  replay(uuid: string, hooks: HookModel[]): string {
    const old = this.deliveries.find((d) => d.uuid === uuid);
    if (!old) throw new Error(`no delivery ${uuid}`);
    const hook = hooks.find((h) => h.id === old.hookId);
    if (!hook) throw new Error(`hook ${old.hookId} is gone`);
    const fresh = randomUUID();
    this.#track(this.#deliver(hook, old.eventType, old.body, fresh));
    return fresh;
  }

  onDelivery(fn: (d: Delivery) => void): () => void {
    this.#listeners.push(fn);
    return () => {
      this.#listeners = this.#listeners.filter((f) => f !== fn);
    };
  }

  /** Wait until every queued delivery has finished. */
  async settle(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all([...this.#pending]);
  }

  #track(p: Promise<void>): void {
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }

  async #deliver(hook: HookModel, eventType: string, body: string, uuid: string): Promise<void> {
    const event = eventHeader(eventType);
    const hex = createHmac('sha256', hook.secret).update(body).digest('hex');
    const sha1 = createHmac('sha1', hook.secret).update(body).digest('hex');
    const headers: Record<string, string> = {
      'User-Agent': 'Go-http-client/1.1',
      'Content-Type': 'application/json',
      'X-Gitea-Delivery': uuid,
      'X-Gitea-Event': event,
      'X-Gitea-Event-Type': eventType,
      'X-Gitea-Hook-Installation-Target-Type': hook.level,
      'X-Gitea-Signature': hook.secret ? hex : '',
      'X-GitHub-Delivery': uuid,
      'X-GitHub-Event': event,
      'X-GitHub-Event-Type': eventType,
      'X-GitHub-Hook-Installation-Target-Type': hook.level,
      'X-Gogs-Delivery': uuid,
      'X-Gogs-Event': event,
      'X-Gogs-Event-Type': eventType,
      'X-Gogs-Signature': hook.secret ? hex : '',
      'X-Hub-Signature': `sha1=${hook.secret ? sha1 : ''}`,
      'X-Hub-Signature-256': `sha256=${hook.secret ? hex : ''}`,
    };
    const d: Delivery = {
      uuid,
      hookId: hook.id,
      url: hook.url,
      event,
      eventType,
      body,
      headers,
      status: undefined,
      error: undefined,
      deliveredAt: new Date().toISOString(),
    };
    this.deliveries.push(d);
    try {
      const res = await request(hook.url, {
        method: 'POST',
        headers,
        body,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      await res.body.dump();
      d.status = res.statusCode;
    } catch (err) {
      d.error = (err as Error).message;
    }
    for (const fn of this.#listeners) fn(d);
  }
}
