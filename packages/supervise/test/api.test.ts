// Deciding from elsewhere: the supervise API over a real HTTP server on loopback,
// driven by `RemoteDesk` as `bb supervise --server` drives it. Requests come from
// a real sidecar over its socket, as an agent's would; decisions are recorded as
// the operator the token names, through `api`; nobody unnamed decides.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type BbError, isBbError } from '@bb/errors';
import { BbDatabase } from '@bb/state';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createSuperviseApi,
  defaultPolicy,
  type Remediator,
  RemoteDesk,
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseDesk,
  SuperviseSidecar,
  SuperviseStore,
  serveSupervise,
} from '../src/index';

const SLUG = 'impl-api01';
const CAROL = `bbop_${'c'.repeat(43)}`;
const WHY = 'pip install needs pypi.org for the test dependencies';

describe('the supervise API, driven by RemoteDesk', () => {
  let root: string;
  let bottle: string;
  let db: BbDatabase;
  let sidecar: RunningSuperviseServer;
  let client: SuperviseClient;
  let http: Server;
  let url: string;
  const applied: string[] = [];

  const remediator: Remediator = {
    async reloadProxies(_slug, kind, text) {
      applied.push(text);
      writeFileSync(
        join(bottle, 'current-config', `${kind === 'routes' ? 'routes' : 'allowlist'}.json`),
        text,
      );
      return { ok: true, detail: 'reloaded' };
    },
  };
  const ask = (hosts: string[]) =>
    client.propose('pipelock-block', {
      allowlist: JSON.stringify({ allow: hosts }),
      justification: WHY,
    });
  const as = (token?: string) => new RemoteDesk({ url, token });
  const code = (p: Promise<unknown>) =>
    p.then(
      () => 'resolved',
      (e) => (isBbError(e) ? (e as BbError).code : String(e)),
    );

  beforeEach(async () => {
    applied.length = 0;
    root = mkdtempSync(join(tmpdir(), 'bb-supervise-api-'));
    bottle = join(root, 'bottles', SLUG);
    mkdirSync(join(bottle, 'current-config'), { recursive: true });
    writeFileSync(
      join(bottle, 'current-config', 'allowlist.json'),
      '{"allow":["registry.npmjs.org"]}',
    );
    writeFileSync(join(bottle, 'current-config', 'routes.json'), '{"routes":[]}');
    db = BbDatabase.open({ path: join(root, 'bot-bottle.db') });
    const desk = new SuperviseDesk({
      store: new SuperviseStore(db),
      bottles: {
        slugs: () => [SLUG],
        dir: () => bottle,
        turn: () => 1,
        allowedBases: () => ['bb-base:latest'],
      },
      policy: { ...defaultPolicy(), egressCeiling: ['pypi.org'] },
      remediator,
    });
    sidecar = await serveSupervise(
      new SuperviseSidecar({
        slug: SLUG,
        dir: join(bottle, 'supervise'),
        currentConfig: join(bottle, 'current-config'),
        allowedBases: ['bb-base:latest'],
        waitMs: 0,
        pollMs: 10,
      }),
      join(root, 'supervise.sock'),
    );
    client = new SuperviseClient({ socketPath: join(root, 'supervise.sock') });
    // The service's door, reduced to what this API needs: carol's token names her.
    const api = createSuperviseApi(desk);
    http = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const request = new Request(`http://127.0.0.1${req.url}`, {
        method: req.method!,
        headers: req.headers as Record<string, string>,
        ...(chunks.length ? { body: Buffer.concat(chunks) } : {}),
      });
      const operator = req.headers.authorization === `Bearer ${CAROL}` ? 'carol' : null;
      const out = (await api(request, { operator })) ?? new Response('no route', { status: 404 });
      res.writeHead(out.status, Object.fromEntries(out.headers));
      res.end(Buffer.from(await out.arrayBuffer()));
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(http.address() as { port: number }).port}`;
  });
  afterEach(async () => {
    await client.close();
    await sidecar.close();
    await new Promise((r) => http.close(r));
    db.close();
    rmSync(root, { recursive: true, force: true });
  });

  it("lists and shows requests; an operator's approval is recorded as theirs, through the API, and reaches the agent", async () => {
    const asked = await ask(['registry.npmjs.org', 'pypi.org']);
    const anyone = as();
    const [row] = await anyone.list({ status: 'pending' });
    expect(row).toMatchObject({
      id: asked.request_id,
      slug: SLUG,
      kind: 'allowlist',
      status: 'pending',
    });
    expect(row!.diff).toContain('+{"allow":["registry.npmjs.org","pypi.org"]}');
    const shown = await anyone.show(asked.request_id);
    expect(shown.justification).toBe(WHY);

    const out = await as(CAROL).approve(asked.request_id, {
      expect: { baseHash: shown.baseHash, candidateHash: shown.candidateHash },
    });
    expect(out.request).toMatchObject({
      status: 'approved',
      decidedBy: 'carol',
      decidedVia: 'api',
      scope: 'turn',
    });
    expect(out.remediation).toMatchObject({ ok: true, detail: 'reloaded' });
    expect(applied).toEqual(['{"allow":["registry.npmjs.org","pypi.org"]}']);
    expect(await client.wait(asked.request_id, 0)).toMatchObject({ status: 'approved' });
    expect(await anyone.list({ status: 'pending' })).toEqual([]);
    expect((await anyone.list()).map((r) => r.status)).toEqual(['approved']);
  });

  it('refuses every decision without a named operator, and leaves the request waiting', async () => {
    const asked = await ask(['registry.npmjs.org', 'pypi.org']);
    const anyone = as();
    expect(await code(anyone.approve(asked.request_id, {}))).toBe('OPERATOR_DENIED');
    expect(await code(anyone.reject(asked.request_id, 'no'))).toBe('OPERATOR_DENIED');
    expect(await code(anyone.cancel(asked.request_id))).toBe('OPERATOR_DENIED');
    expect(await code(anyone.edit(SLUG, 'allowlist', '{"allow":["pypi.org"]}', 'bottle'))).toBe(
      'OPERATOR_DENIED',
    );
    expect((await anyone.show(asked.request_id)).status).toBe('pending');
    expect(applied).toEqual([]);
  });

  it("answers the desk's refusals with their codes: a changed proposal, the ceiling, a request decided already, bad ids", async () => {
    const asked = await ask(['registry.npmjs.org', 'pypi.org']);
    const carol = as(CAROL);
    expect(
      await code(carol.approve(asked.request_id, { expect: { candidateHash: 'ffffffff' } })),
    ).toBe('CONFLICT');
    const far = await ask(['registry.npmjs.org', 'example.org']);
    const beyond = await carol.approve(far.request_id, {}).catch((e: BbError) => e);
    expect(beyond).toMatchObject({ code: 'SCOPE_DENIED' });
    expect((beyond as BbError).message).toMatch(/beyond the operator's ceiling.*example\.org/);
    // An operator may exceed it knowingly, as on the host.
    expect((await carol.approve(far.request_id, { override: true })).request).toMatchObject({
      status: 'approved',
      override: true,
    });
    expect(await code(carol.reject(far.request_id, 'too late'))).toBe('CONFLICT');
    expect(await code(carol.show('sr_nope'))).toBe('INVALID_INPUT');
    expect(await code(carol.show(`sr_${'z'.repeat(20)}`))).toBe('NOT_FOUND');
    expect(await code(carol.current('../etc', 'routes'))).toBe('INVALID_INPUT');

    const rejected = await carol.reject(asked.request_id, 'Use the mirror.');
    expect(rejected).toMatchObject({ status: 'rejected', decidedBy: 'carol', decidedVia: 'api' });
    expect(await client.wait(asked.request_id, 0)).toMatchObject({
      status: 'rejected',
      reason: 'Use the mirror.',
    });
  });

  it("reads and changes a bottle's allowlist as the operator's own edit", async () => {
    const carol = as(CAROL);
    expect(await carol.current(SLUG, 'allowlist')).toBe('{"allow":["registry.npmjs.org"]}');
    const out = await carol.edit(SLUG, 'allowlist', '{"allow":["pypi.org"]}\n', 'bottle');
    expect(out.request).toMatchObject({
      tool: 'operator-edit-api',
      status: 'approved',
      decidedBy: 'carol',
      decidedVia: 'api',
    });
    expect(await carol.current(SLUG, 'allowlist')).toBe('{"allow":["pypi.org"]}\n');
  });

  it("checks an edit over the API as an agent's proposal: no file references, offered secrets only, the ceiling unless overridden", async () => {
    const carol = as(CAROL);
    const route = (header: string) =>
      JSON.stringify({
        routes: [
          { prefix: '/x', upstream: 'https://api.example.org/', headers: { 'x-key': header } },
        ],
      });
    // On the host an operator may point a route at a file; a token from elsewhere may not.
    expect(
      await code(carol.edit(SLUG, 'routes', route('file:/root/.ssh/id_ed25519'), 'bottle')),
    ).toBe('INVALID_INPUT');
    // Nor at a variable of the orchestrator's that the operator never offered bottles.
    const secret = await carol
      .edit(SLUG, 'routes', route('env:AWS_SECRET_ACCESS_KEY'), 'bottle')
      .catch((e: BbError) => e);
    expect(secret).toMatchObject({ code: 'SCOPE_DENIED' });
    expect((secret as Error).message).toMatch(/has not declared for bottles/);
    // Past the ceiling only when asked, knowingly.
    expect(await code(carol.edit(SLUG, 'allowlist', '{"allow":["example.net"]}', 'bottle'))).toBe(
      'SCOPE_DENIED',
    );
    const over = await carol.edit(SLUG, 'allowlist', '{"allow":["example.net"]}', 'bottle', {
      override: true,
    });
    expect(over.request).toMatchObject({
      tool: 'operator-edit-api',
      override: true,
      decidedBy: 'carol',
    });
    expect(applied).toEqual(['{"allow":["example.net"]}']);
  });

  it('takes JSON bodies only, of the shape each call takes, and says which methods a path serves', async () => {
    const asked = await ask(['registry.npmjs.org', 'pypi.org']);
    const post = (path: string, body: string, type = 'application/json') =>
      fetch(`${url}/api/supervise${path}`, {
        method: 'POST',
        headers: { 'content-type': type, authorization: `Bearer ${CAROL}` },
        body,
      });
    // A form a page elsewhere could send without asking first is not taken.
    const form = await post(`/requests/${asked.request_id}/reject`, 'reason=no', 'text/plain');
    expect(form.status).toBe(400);
    expect(await form.text()).toMatch(/send the body as JSON/);
    const extra = await post(`/requests/${asked.request_id}/approve`, '{"by":"mallory"}');
    expect(extra.status).toBe(400);
    expect(await extra.text()).toMatch(/not what this call takes/);
    const wrong = await fetch(`${url}/api/supervise/requests/${asked.request_id}/approve`);
    expect(wrong.status).toBe(405);
    expect((await as().show(asked.request_id)).status).toBe('pending');
  });

  it('says plainly when the orchestrator cannot be reached, and refuses a URL holding credentials', async () => {
    const gone = new RemoteDesk({ url: 'http://127.0.0.1:1' });
    const err = await gone.list().catch((e: BbError) => e);
    expect(err).toMatchObject({ code: 'BACKEND_UNAVAILABLE' });
    expect((err as Error).message).toMatch(
      /cannot reach the orchestrator at http:\/\/127\.0\.0\.1:1/,
    );
    expect(() => new RemoteDesk({ url: 'http://carol:pw@127.0.0.1:8080' })).toThrow(
      /no credentials or query/,
    );
    expect(() => new RemoteDesk({ url: 'not a url' })).toThrow(/the orchestrator's URL/);
    // The token crosses the network only over TLS, or to this machine.
    expect(() => new RemoteDesk({ url: 'http://bb.example:8080', token: CAROL })).toThrow(
      /plain http to another machine/,
    );
    expect(() => new RemoteDesk({ url: 'https://bb.example:8443' })).not.toThrow();
    expect(() => new RemoteDesk({ url: 'http://[::1]:8080' })).not.toThrow();
  });
});
