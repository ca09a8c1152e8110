// The orchestrator's own door. Exposing the webhook to the forge must not expose
// the dashboard and the APIs (op logs with comment bodies, every bottle) to the
// same network: those answer an operator token, or only on a loopback listener.
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { LocalBackend } from '@bb/headless';
import type { RunningOrchestrator } from '@bb/service';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forgeWorld, serveFor } from '../support';

const TOKEN = 'bb-claude-door-token-7c1e';
const SECRET = 'door-webhook-secret';
const OPERATOR = 'operator-token-for-the-dashboard-41d2';

describe('red team: the orchestrator door', () => {
  let gitea: GiteaTestServer;
  const homes: string[] = [];
  const running: RunningOrchestrator[] = [];
  beforeAll(async () => {
    gitea = await createGiteaTestServer({ world: forgeWorld(TOKEN) });
  });
  afterAll(async () => {
    for (const o of running) await o.close();
    await gitea?.close();
    for (const h of homes) rmSync(h, { recursive: true, force: true });
  });

  const start = async (extra: Record<string, string>) => {
    const home = mkdtempSync(join(tmpdir(), 'bb-door-'));
    homes.push(home);
    const o = await serveFor({
      home,
      gitea,
      token: TOKEN,
      secret: SECRET,
      backend: new LocalBackend(),
      env: extra,
      hook: false,
    });
    running.push(o);
    return `http://127.0.0.1:${new URL(o.url).port}`;
  };
  const delivery = (body: string) => ({
    'content-type': 'application/json',
    'x-gitea-event': 'issues',
    'x-gitea-delivery': crypto.randomUUID(),
    'x-gitea-signature': createHmac('sha256', SECRET).update(body).digest('hex'),
  });

  it('on a non-loopback listener without an operator token, only the webhook and health answer', async () => {
    const url = await start({ BB_HOST: '0.0.0.0' });
    for (const path of ['/', '/api/bottles', '/api/runs'])
      expect((await fetch(`${url}${path}`)).status, path).toBe(403);
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    const body = JSON.stringify({ action: 'opened' });
    const hook = await fetch(`${url}/webhooks/gitea`, {
      method: 'POST',
      headers: delivery(body),
      body,
    });
    expect(hook.status).not.toBe(403);
    expect(hook.status).toBeLessThan(500);
  });

  it('with an operator token, the APIs answer the token and nothing else', async () => {
    const url = await start({ BB_HOST: '0.0.0.0', BB_API_TOKEN: OPERATOR });
    for (const path of ['/', '/api/bottles', '/api/runs']) {
      expect((await fetch(`${url}${path}`)).status, path).toBe(401);
      expect(
        (await fetch(`${url}${path}`, { headers: { authorization: 'Bearer wrong-token-000000' } }))
          .status,
      ).toBe(401);
      expect(
        (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${OPERATOR}` } })).status,
        path,
      ).toBe(200);
    }
  });
});
