import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { BbError } from '@bb/errors';
import { type ForgeEvent, giteaKind, parseGiteaWebhook } from '@bb/forge';
import { MemoryForgeStateStore } from '@bb/state';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createWebhookHandler,
  createWebhookListener,
  type WebhookHandlerOptions,
} from '../src/webhook';

const fixtures = fileURLToPath(
  new URL('../../forge/test/fixtures/gitea/webhooks', import.meta.url),
);
const SECRET = 'bb-webhook-secret';
const scheme = giteaKind.webhook;
const fixture = (name: string) => ({
  headers: JSON.parse(readFileSync(join(fixtures, `${name}.headers.json`), 'utf8')) as Record<
    string,
    string
  >,
  body: readFileSync(join(fixtures, `${name}.json`)),
});
const post = (headers: Record<string, string>, body: string | Uint8Array) =>
  new Request('http://bb/webhooks/gitea', { method: 'POST', headers, body });

const servers: Array<{ close(): void }> = [];
afterAll(() => {
  for (const s of servers) s.close();
});

/**
 * The node:http listener behind a real server, driven with the same `Request`s:
 * a declared length is sent as declared, any other body chunked, and sending
 * stops as soon as the answer is in.
 */
async function overNodeHttp(
  options: WebhookHandlerOptions,
): Promise<(req: Request) => Promise<Response>> {
  const server = createServer(createWebhookListener(options));
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return (req) =>
    new Promise<Response>((resolve, reject) => {
      let answered = false;
      const out = httpRequest(
        {
          host: '127.0.0.1',
          port,
          path: '/webhooks/gitea',
          method: req.method,
          headers: Object.fromEntries(req.headers),
          agent: false,
        },
        (res) => {
          answered = true;
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve(new Response(Buffer.concat(chunks), { status: res.statusCode ?? 0 })),
          );
          res.on('error', reject);
        },
      );
      out.on('error', (err) => {
        if (!answered) reject(err);
      });
      void (async () => {
        if (req.body)
          for await (const chunk of req.body as unknown as AsyncIterable<Uint8Array>) {
            if (answered || out.destroyed) break;
            if (!out.write(chunk)) await new Promise((r) => out.once('drain', r));
            // A client that reads its answer while it sends (as Gitea's does).
            await new Promise((r) => setImmediate(r));
          }
        if (!answered && !out.destroyed) out.end();
      })().catch(() => {});
    });
}

const adapters = [
  ['the Request handler', async (o: WebhookHandlerOptions) => createWebhookHandler(o)],
  ['the node:http listener', overNodeHttp],
] as const;

describe.each(adapters)('webhook endpoint, %s', (_name, make) => {
  async function setup(ledger = new MemoryForgeStateStore()) {
    const events: ForgeEvent[] = [];
    const handler = await make({
      scheme,
      secrets: [SECRET],
      ledger,
      enqueue: (e) => events.push(e),
    });
    return { events, handler, ledger };
  }

  it('accepts a signed Gitea delivery once; a duplicate or a replay with a new UUID is acknowledged, not processed', async () => {
    const { events, handler } = await setup();
    const { headers, body } = fixture('issues.assigned');
    const first = await handler(post(headers, body));
    expect(first.status).toBe(202);
    expect(await first.json()).toMatchObject({ accepted: true });
    expect((await handler(post(headers, body))).status).toBe(202);
    const replay = await handler(
      post({ ...headers, 'X-Gitea-Delivery': 'a-brand-new-uuid' }, body),
    );
    expect(await replay.json()).toMatchObject({ duplicate: true });
    expect(events.map((e) => e.kind)).toEqual(['issue_targeting_changed']);
  });

  it('accepts the old secret alongside the new one while it changes, and never an empty one', async () => {
    const { headers, body } = fixture('issues.assigned');
    // The fixture is signed with SECRET: as the previous secret it still verifies.
    const events: ForgeEvent[] = [];
    const rotating = await make({
      scheme,
      secrets: ['the-new-secret-1234', SECRET],
      ledger: new MemoryForgeStateStore(),
      enqueue: (e) => events.push(e),
    });
    expect((await rotating(post(headers, body))).status).toBe(202);
    expect(events).toHaveLength(1);
    const changed = await make({
      scheme,
      secrets: ['the-new-secret-1234'],
      ledger: new MemoryForgeStateStore(),
      enqueue: () => {},
    });
    expect((await changed(post(headers, body))).status).toBe(401);
    // A scheme that would take anything with an empty secret is never given one.
    const given: string[][] = [];
    const lax = await make({
      scheme: {
        ...scheme,
        verify: (_h, _b, s) => {
          given.push([...s]);
          return s.includes('');
        },
      },
      secrets: ['', SECRET],
      ledger: new MemoryForgeStateStore(),
      enqueue: () => {},
    });
    expect((await lax(post(headers, body))).status).toBe(401);
    expect(given).toEqual([[SECRET]]);
    await expect(
      (async () =>
        make({ scheme, secrets: [''], ledger: new MemoryForgeStateStore(), enqueue: () => {} }))(),
    ).rejects.toThrow(/at least one non-empty secret/);
  });

  it('refuses a bad signature with 401 before parsing or writing anything', async () => {
    const { events, handler, ledger } = await setup();
    const { headers, body } = fixture('issue_comment.created.on_pull');
    const res = await handler(
      post(
        {
          ...headers,
          'X-Gitea-Signature': '0'.repeat(64),
          'X-Hub-Signature-256': `sha256=${'0'.repeat(64)}`,
        },
        body,
      ),
    );
    expect(res.status).toBe(401);
    expect(events).toEqual([]);
    const key = (parseGiteaWebhook(headers, body) as { key: string }).key;
    expect(ledger.getDelivery(key)).toBeUndefined();
  });

  it('answers 415 for a form hook and 413 for a body too large, declared or streamed', async () => {
    const { handler } = await setup();
    const { headers, body } = fixture('issues.opened');
    expect(
      (
        await handler(
          post({ ...headers, 'Content-Type': 'application/x-www-form-urlencoded' }, body),
        )
      ).status,
    ).toBe(415);
    expect(
      (await handler(post({ ...headers, 'Content-Length': String(5 * 1024 * 1024) }, body))).status,
    ).toBe(413);
    let sent = 0;
    const endless = new ReadableStream<Uint8Array>({
      pull(c) {
        sent += 64 * 1024;
        if (sent > 4 * 1024 * 1024) c.close();
        else c.enqueue(new Uint8Array(64 * 1024));
      },
    });
    const streamed = new Request('http://bb/webhooks/gitea', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: endless,
      duplex: 'half',
    } as RequestInit);
    expect((await handler(streamed)).status).toBe(413);
    expect(sent).toBeLessThan(2 * 1024 * 1024);
  });

  it('answers 400 for malformed JSON behind a good signature, and 202 for events it ignores', async () => {
    const { events, handler } = await setup();
    const bad = '{"action": "opened", ';
    const sig = createHmac('sha256', SECRET).update(bad).digest('hex');
    const res = await handler(
      post(
        { 'content-type': 'application/json', 'x-gitea-event': 'issues', 'x-gitea-signature': sig },
        bad,
      ),
    );
    expect(res.status).toBe(400);
    const push = fixture('push.branch');
    const ignored = await handler(post(push.headers, push.body));
    expect(ignored.status).toBe(202);
    expect(await ignored.json()).toMatchObject({ ignored: expect.stringMatching(/push/) });
    expect(events).toEqual([]);
  });

  it('answers 503, not 202, when the ledger cannot be written, and processes nothing', async () => {
    const failing = new MemoryForgeStateStore();
    failing.recordDelivery = () => {
      throw new BbError('STATE_BUSY', 'database is locked');
    };
    const { events, handler } = await setup(failing);
    const { headers, body } = fixture('issues.assigned');
    expect((await handler(post(headers, body))).status).toBe(503);
    expect(events).toEqual([]);
  });

  it('50 concurrent deliveries of one change make one event', async () => {
    const { events, handler } = await setup();
    const { headers, body } = fixture('issue_comment.created.on_pull');
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        handler(post({ ...headers, 'X-Gitea-Delivery': `uuid-${i}` }, body)),
      ),
    );
    expect(results.every((r) => r.status === 202)).toBe(true);
    expect(events).toHaveLength(1);
  });
});

describe('webhook endpoint on node:http, against a hostile sender', () => {
  it('a body sent one byte per chunk holds about its own size in memory, not the socket buffers of each piece', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    let heldBytes: number | undefined;
    const held = () => {
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    let before = 0;
    const server = createServer(
      createWebhookListener({
        scheme: {
          ...scheme,
          // Called once the whole body is in: what the endpoint holds then is measured.
          verify: () => {
            gc();
            heldBytes = held() - before;
            return false;
          },
        },
        secrets: [SECRET],
        ledger: new MemoryForgeStateStore(),
        enqueue: () => {},
      }),
    );
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const pieces = 900 * 1024; // under the 1 MiB cap
    const wire = Buffer.from('1\r\nX\r\n'.repeat(pieces));
    gc();
    before = held();
    const status = await new Promise<string>((resolve, reject) => {
      const s = connect((server.address() as AddressInfo).port, '127.0.0.1');
      s.on('error', reject);
      s.once('data', (d) => {
        resolve(String(d).split('\r\n')[0] ?? '');
        s.destroy();
      });
      s.write(
        'POST /webhooks/gitea HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
      );
      s.write(wire);
      s.write('0\r\n\r\n');
    });
    expect(status).toBe('HTTP/1.1 401 Unauthorized');
    // The body is 0.9 MB; keeping each piece kept ~30x that (the piece's socket buffer).
    expect(heldBytes).toBeDefined();
    expect(heldBytes).toBeLessThan(24 * 1024 * 1024);
  }, 60_000);
});
