// The whole supervise exchange in one process: a sidecar on a real Unix socket,
// the client an agent uses, the operator's desk over a real SQLite database, and
// a remediator that records what it was asked to apply.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { BbDatabase } from '@bb/state';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  defaultPolicy,
  type Policy,
  type Remediator,
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseDesk,
  SuperviseSidecar,
  SuperviseStore,
  serveSupervise,
} from '../src/index';

const SLUG = 'impl-abc12';
const ALLOW = JSON.stringify({ allow: ['registry.npmjs.org'] }, null, 2);
const WANT = JSON.stringify({ allow: ['registry.npmjs.org', 'pypi.org'] }, null, 2);
const WHY = 'pip install needs pypi.org for the test dependencies';

/** The agent asks for one more host with the usual justification. */
const askToAllow = (client: SuperviseClient, host: string) =>
  client.propose('pipelock-block', {
    allowlist: JSON.stringify({ allow: [host] }),
    justification: WHY,
  });

describe('supervise: propose, decide, answer', () => {
  let root: string;
  let bottle: string;
  let db: BbDatabase;
  let server: RunningSuperviseServer | undefined;
  let client: SuperviseClient;
  let now: number;
  const applied: Array<{ slug: string; kind: string; text: string; scope: string }> = [];
  let failApply = false;
  // As the real one: the file is rewritten once the proxy has reloaded, a while later.
  let applyMs = 0;
  let applying = false;
  let overlapped = false;

  const remediator: Remediator = {
    async reloadProxies(slug, kind, text, scope) {
      if (failApply) throw new Error('the proxy did not answer');
      if (applying) overlapped = true;
      applying = true;
      if (applyMs) await new Promise((r) => setTimeout(r, applyMs));
      applying = false;
      applied.push({ slug, kind, text, scope });
      writeFileSync(
        join(bottle, 'current-config', kind === 'routes' ? 'routes.json' : 'allowlist.json'),
        text,
      );
      return { ok: true, detail: 'reloaded' };
    },
  };
  const sidecar = (o: Partial<ConstructorParameters<typeof SuperviseSidecar>[0]> = {}) =>
    new SuperviseSidecar({
      slug: SLUG,
      dir: join(bottle, 'supervise'),
      currentConfig: join(bottle, 'current-config'),
      allowedBases: ['bb-base:latest'],
      waitMs: 300,
      pollMs: 10,
      now: () => now,
      ...o,
    });
  const desk = (policy: Partial<Policy> = {}) =>
    new SuperviseDesk({
      store: new SuperviseStore(db),
      bottles: {
        slugs: () => [SLUG],
        dir: () => bottle,
        turn: () => 2,
        allowedBases: () => ['bb-base:latest'],
      },
      policy: { ...defaultPolicy(), egressCeiling: ['pypi.org', '*.pythonhosted.org'], ...policy },
      remediator,
      now: () => now,
    });
  const start = async (s = sidecar()) => {
    await server?.close();
    server = await serveSupervise(s, join(root, 'supervise.sock'));
  };

  beforeEach(async () => {
    now = Date.parse('2026-11-24T10:00:00Z');
    applied.length = 0;
    failApply = false;
    applyMs = 0;
    overlapped = false;
    root = mkdtempSync(join(tmpdir(), 'bb-supervise-'));
    bottle = join(root, 'bottles', SLUG);
    mkdirSync(join(bottle, 'current-config'), { recursive: true });
    mkdirSync(join(bottle, 'state'), { recursive: true });
    writeFileSync(join(bottle, 'current-config', 'allowlist.json'), ALLOW);
    writeFileSync(join(bottle, 'current-config', 'routes.json'), JSON.stringify({ routes: [] }));
    writeFileSync(join(bottle, 'current-config', 'Dockerfile'), 'FROM bb-base:latest\n');
    writeFileSync(
      join(bottle, 'state', 'egress.jsonl'),
      `${JSON.stringify({ time: '2026-11-24T09:59:58.000Z', kind: 'egress', host: 'pypi.org', port: 443, decision: 'denied', rule: 'no rule allows this host (deny by default)', method: 'CONNECT', bytesUp: 0, bytesDown: 0, durationMs: 0 })}\n`,
    );
    db = BbDatabase.open({ path: join(root, 'bot-bottle.db') });
    await start();
    client = new SuperviseClient({ socketPath: join(root, 'supervise.sock') });
  });
  afterEach(async () => {
    await client.close();
    await server?.close();
    server = undefined;
    db.close();
    rmSync(root, { recursive: true, force: true });
  });

  /** Another replica on the same records: it sees the bottle's files (or not) but does not run it. */
  const elsewhere = (o: { sees: boolean }) => {
    const calls: string[] = [];
    const d = new SuperviseDesk({
      store: new SuperviseStore(db),
      bottles: {
        slugs: () => (o.sees ? [SLUG] : []),
        dir: () => bottle,
        turn: () => 2,
        allowedBases: () => ['bb-base:latest'],
      },
      policy: { ...defaultPolicy(), egressCeiling: ['pypi.org'] },
      remediator: {
        async reloadProxies(slug) {
          calls.push(slug);
          return { ok: true, detail: 'reloaded on the wrong engine' };
        },
      },
      appliesTo: () => false,
      now: () => now,
    });
    return { desk: d, calls };
  };

  it('in a fleet, a decision made on a replica that does not run the bottle is applied by the one that does, once', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    const runs = desk();
    const compact = JSON.stringify({ allow: ['registry.npmjs.org', 'pypi.org'] });
    for (const sees of [true, false]) {
      // Then a second request, decided on a replica that does not even see the bottle's files.
      const req = sees
        ? a
        : await client.propose('pipelock-block', { allowlist: compact, justification: WHY });
      await runs.sync();
      const other = elsewhere({ sees });
      const out = await other.desk.approve(req.request_id, { by: 'bob', via: 'api' });
      expect(out.remediation).toBeNull();
      expect(out.request).toMatchObject({
        status: 'approved',
        decidedBy: 'bob',
        remediation: null,
      });
      expect(other.calls).toEqual([]);
      expect(applied).toEqual([]);
      // The agent hears nothing until the change is in place.
      expect(await client.wait(req.request_id, 0)).toMatchObject({ status: 'pending' });
      // The replica that runs the bottle applies it at its next look, and only once.
      expect((await runs.sync()).applied).toEqual([req.request_id]);
      expect((await runs.sync()).applied).toEqual([]);
      expect((await other.desk.sync()).applied).toEqual([]);
      expect(applied.map((x) => x.text)).toEqual([sees ? WANT : compact]);
      expect(await client.wait(req.request_id, 0)).toMatchObject({ status: 'approved' });
      expect((await runs.show(req.request_id)).remediation).toEqual({
        ok: true,
        detail: 'reloaded',
      });
      expect(other.calls).toEqual([]);
      applied.length = 0;
      writeFileSync(join(bottle, 'current-config', 'allowlist.json'), ALLOW);
    }
  });

  it('a decision being applied by one desk is not applied again by another desk syncing meanwhile', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    // The CLI's desk approves (and applies, slowly) while the service's desk looks.
    applyMs = 300;
    const cli = desk();
    const service = desk();
    const approving = cli.approve(a.request_id, { by: 'alice', via: 'cli' });
    await new Promise((r) => setTimeout(r, 100));
    expect((await service.sync()).applied).toEqual([]);
    expect((await approving).remediation).toEqual({ ok: true, detail: 'reloaded' });
    expect((await service.sync()).applied).toEqual([]);
    expect(applied.map((x) => x.text)).toEqual([WANT]);
    expect(overlapped).toBe(false);
  });

  it('in a fleet, approving while another desk holds the claim on an earlier decision of the same bottle does not wait for it', async () => {
    const first = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    const runs = desk();
    await runs.sync();
    await elsewhere({ sees: true }).desk.approve(first.request_id, { by: 'bob', via: 'api' });
    // A desk that is applying it now (or died doing so, a moment ago).
    const store = new SuperviseStore(db);
    expect(
      await store.claimApply(
        first.request_id,
        'another-desk',
        new Date(now).toISOString(),
        new Date(now - 1).toISOString(),
      ),
    ).toBe(true);
    const second = await client.propose('pipelock-block', {
      allowlist: JSON.stringify({ allow: ['registry.npmjs.org', 'pypi.org'] }),
      justification: `${WHY} (second)`,
    });
    const out = await Promise.race([
      runs.approve(second.request_id, { by: 'alice', via: 'cli' }),
      new Promise<'stuck'>((r) => setTimeout(() => r('stuck'), 5000)),
    ]);
    expect(out).not.toBe('stuck');
    expect(applied).toHaveLength(1);
    // The claimed one is left to its desk.
    expect((await runs.sync()).applied).toEqual([]);
  });

  it('in a fleet, the replica that applies a decision holds it to its own rules, and a turn that ends closes what was not applied', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    // This replica's ceiling does not have pypi.org; the deciding one's does.
    const runs = desk({ egressCeiling: [] });
    await runs.sync();
    await elsewhere({ sees: true }).desk.approve(a.request_id, { by: 'bob', via: 'api' });
    expect((await runs.sync()).applied).toEqual([a.request_id]);
    expect(applied).toEqual([]);
    expect(await client.wait(a.request_id, 0)).toMatchObject({
      status: 'cancelled',
      reason: expect.stringContaining("beyond this orchestrator's ceiling"),
    });
    // Approved elsewhere, and the turn ends before this replica applies it: never applied.
    const b = await client.propose('pipelock-block', {
      allowlist: JSON.stringify({ allow: ['registry.npmjs.org', 'pypi.org'] }),
      justification: WHY,
    });
    await runs.sync();
    await elsewhere({ sees: true }).desk.approve(b.request_id, { by: 'bob', via: 'api' });
    expect(await runs.cancelAll(SLUG, 'the turn it was asked in ended before a decision')).toEqual([
      b.request_id,
    ]);
    expect((await desk().sync()).applied).toEqual([]);
    expect(applied).toEqual([]);
    expect(await client.wait(b.request_id, 0)).toMatchObject({ status: 'cancelled' });
  });

  it('in a fleet, a decision whose bottle changed before it could be applied is not applied, and the agent is told', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    const runs = desk();
    await runs.sync();
    await elsewhere({ sees: true }).desk.approve(a.request_id, { by: 'bob', via: 'api' });
    // Meanwhile the operator changed the bottle's allowlist on the host.
    writeFileSync(join(bottle, 'current-config', 'allowlist.json'), '{"allow":["other.example"]}');
    expect((await runs.sync()).applied).toEqual([a.request_id]);
    expect(applied).toEqual([]);
    expect(await client.wait(a.request_id, 0)).toMatchObject({
      status: 'cancelled',
      reason: expect.stringContaining('changed between the proposal and the decision'),
    });
  });

  it('refuses at once, with its reason, a kind the platform cannot apply; nothing reaches the operator', async () => {
    await start(sidecar({ refused: { dockerfile: 'this bottle runs on Kubernetes' } }));
    const err = await client
      .propose('capability-block', {
        dockerfile: 'FROM bb-base:latest\nRUN true\n',
        justification: 'the tests need another tool',
      })
      .catch((e) => e);
    expect(isBbError(err, 'UNSUPPORTED')).toBe(true);
    expect((err as Error).message).toBe(
      'capability-block cannot be applied here: this bottle runs on Kubernetes',
    );
    expect(await desk().list({})).toEqual([]);
    // What it can apply is asked for as ever.
    expect((await askToAllow(client, 'pypi.org')).status).toBe('pending');
  });

  it('the socket answers its own three methods and nothing a JavaScript object inherits', async () => {
    const lines: Array<Record<string, unknown>> = [];
    await server?.close();
    server = await serveSupervise(sidecar(), join(root, 'supervise.sock'), {
      log: (l) => lines.push(l),
    });
    const call = (method: string) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        const req = request(
          {
            socketPath: join(root, 'supervise.sock'),
            path: '/rpc',
            method: 'POST',
            headers: { 'content-type': 'application/json' },
          },
          (res) => {
            let body = '';
            res.on('data', (d: Buffer) => (body += d));
            res.on('end', () => resolve(JSON.parse(body) as Record<string, unknown>));
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { x: 1 } }));
      });
    for (const m of [
      'constructor',
      'toString',
      'valueOf',
      'hasOwnProperty',
      '__proto__',
      '__defineGetter__',
      'isPrototypeOf',
    ]) {
      const out = await call(m);
      expect(out['result'], m).toBeUndefined();
      expect((out['error'] as { code: number }).code, m).toBe(-32601);
    }
    expect(lines.filter((l) => l['ok'] === true)).toEqual([]);
    // Its own methods still answer.
    expect((await call('config'))['result']).toBeDefined();
  });

  it('a proposal waits, is seen by the operator with its diff and evidence, and approval applies it before the agent hears', async () => {
    const first = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    expect(first).toMatchObject({ status: 'pending', kind: 'allowlist' });
    expect(first.request_id).toMatch(/^sr_[a-z0-9]{20}$/);

    const d = desk();
    const [view] = await d.list({ status: 'pending' });
    expect(view).toMatchObject({
      id: first.request_id,
      slug: SLUG,
      kind: 'allowlist',
      turn: 2,
      justification: WHY,
    });
    expect(view!.diff).toMatch(/^\+\s+"pypi.org"$/m);
    expect(view!.evidence).toEqual([
      expect.objectContaining({ host: 'pypi.org', port: 443, kind: 'egress' }),
    ]);
    expect(view!.findings.map((f) => f.code)).toEqual(['host-new']);
    expect(await d.awaitingOperator(SLUG)).toBe(true);

    const waiting = client.wait(first.request_id, 5000);
    const outcome = await d.approve(first.request_id, { by: 'alice', via: 'cli', scope: 'bottle' });
    expect(outcome.remediation).toEqual({ ok: true, detail: 'reloaded' });
    expect(applied).toEqual([{ slug: SLUG, kind: 'allowlist', text: WANT, scope: 'bottle' }]);
    expect(await waiting).toMatchObject({ status: 'approved', scope: 'bottle', file: WANT });
    expect(await d.awaitingOperator(SLUG)).toBe(false);
    expect(await new SuperviseStore(db).get(first.request_id)).toMatchObject({
      status: 'approved',
      decidedBy: 'alice',
      decidedVia: 'cli',
      scope: 'bottle',
      remediation: { ok: true },
    });
    // The change is undone (say the turn it was approved for ended): asking again is a new request.
    writeFileSync(join(bottle, 'current-config', 'allowlist.json'), ALLOW);
    const again = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    expect(again).toMatchObject({ status: 'pending' });
    expect(again.request_id).not.toBe(first.request_id);
  });

  it('an identical re-call is the same request; a rejection reaches the agent verbatim', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    const b = await client.propose('pipelock-block', {
      allowlist: WANT,
      justification: `${WHY}, really`,
    });
    expect(b.request_id).toBe(a.request_id);
    const d = desk();
    expect(await d.list()).toHaveLength(1);
    await d.reject(a.request_id, 'Use the vendored wheels in ./vendor instead.', {
      by: 'alice',
      via: 'cli',
    });
    const again = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    expect(again).toMatchObject({
      status: 'rejected',
      request_id: a.request_id,
      reason: 'Use the vendored wheels in ./vendor instead.',
    });
    expect(applied).toEqual([]);
  });

  it('an operator may approve a modified file; it is checked like a proposal', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    const d = desk();
    await expect(
      d.approve(a.request_id, { by: 'alice', via: 'cli', edited: '{"allow": ["*"]}' }),
    ).rejects.toThrow(/allows too much/);
    expect((await d.show(a.request_id)).status).toBe('pending');
    const edited = JSON.stringify({ allow: ['registry.npmjs.org', 'pypi.org:443'] });
    await d.approve(a.request_id, { by: 'alice', via: 'cli', edited });
    expect(await client.wait(a.request_id)).toMatchObject({ status: 'modified', file: edited });
    expect(applied.map((x) => x.text)).toEqual([edited]);
  });

  it('a decision is bound to the files the operator saw', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    const d = desk();
    const v = await d.show(a.request_id);
    await expect(
      d.approve(a.request_id, { by: 'alice', via: 'cli', expect: { candidateHash: 'ffff' } }),
    ).rejects.toThrow(/not the one you reviewed/);
    // The bottle's allowlist changes under the proposal (the operator edited it by hand).
    writeFileSync(join(bottle, 'current-config', 'allowlist.json'), JSON.stringify({ allow: [] }));
    await expect(
      d.approve(a.request_id, {
        by: 'alice',
        via: 'cli',
        expect: { baseHash: v.baseHash, candidateHash: v.candidateHash },
      }),
    ).rejects.toThrow(/changed since the agent proposed this/);
    expect(applied).toEqual([]);
    expect((await d.show(a.request_id)).status).toBe('pending');
  });

  it("the operator's ceiling holds unless overridden", async () => {
    const wide = JSON.stringify({
      allow: ['registry.npmjs.org', 'pypi.org', 'collector.evil.test'],
    });
    const a = await client.propose('pipelock-block', { allowlist: wide, justification: WHY });
    const d = desk();
    expect((await d.show(a.request_id)).beyondCeiling).toEqual([
      expect.stringContaining('collector.evil.test'),
    ]);
    const err = await d.approve(a.request_id, { by: 'alice', via: 'cli' }).catch((e) => e);
    expect(isBbError(err, 'SCOPE_DENIED')).toBe(true);
    expect(applied).toEqual([]);
    await d.approve(a.request_id, { by: 'alice', via: 'cli', override: true });
    expect((await new SuperviseStore(db).get(a.request_id))!.override).toBe(true);
  });

  it('routes: a credential to a host the ceiling does not name needs an override', async () => {
    const routes = JSON.stringify({
      routes: [
        {
          prefix: '/svc',
          upstream: 'https://api.svc.test',
          headers: { 'x-api-key': 'env:SVC_KEY' },
        },
      ],
    });
    const a = await client.propose('cred-proxy-block', {
      routes,
      justification: 'the svc API needs its key',
    });
    const d = desk({ credentialHosts: { SVC_KEY: ['api.svc.test'] } });
    expect((await d.show(a.request_id)).findings.map((f) => f.code)).toEqual(['secret-new']);
    await d.approve(a.request_id, { by: 'alice', via: 'cli' });
    expect(applied[0]).toMatchObject({ kind: 'routes', text: routes });
  });

  it('a route is a way out even without a secret: a new origin is held to the egress ceiling', async () => {
    const relay = JSON.stringify({
      routes: [{ prefix: '/x', upstream: 'https://collector.evil.test', headers: {} }],
    });
    const a = await client.propose('cred-proxy-block', {
      routes: relay,
      justification: 'I need a relay out',
    });
    const d = desk();
    expect((await d.show(a.request_id)).beyondCeiling).toEqual([
      expect.stringContaining('https://collector.evil.test'),
    ]);
    await expect(d.approve(a.request_id, { by: 'alice', via: 'cli' })).rejects.toThrow(
      /beyond the operator's ceiling/,
    );
    // Inside the ceiling, it goes through.
    const ok = JSON.stringify({
      routes: [{ prefix: '/pypi', upstream: 'https://pypi.org/simple', headers: {} }],
    });
    const b = await client.propose('cred-proxy-block', {
      routes: ok,
      justification: 'the simple index',
    });
    expect((await d.show(b.request_id)).beyondCeiling).toEqual([]);
  });

  it('a request expires after its TTL, and pending survives a sidecar and a desk restart', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    // The sidecar restarts: the request is on disk, not in its memory.
    await start(sidecar());
    expect(await client.wait(a.request_id, 0)).toMatchObject({ status: 'pending' });
    await desk().sync();
    // A new desk on the same database (an orchestrator restart).
    expect((await desk().list({ status: 'pending' })).map((r) => r.id)).toEqual([a.request_id]);
    now += 24 * 3600_000 + 1;
    expect(await client.wait(a.request_id, 0)).toMatchObject({ status: 'expired' });
    expect((await desk().sync()).expired).toEqual([a.request_id]);
    expect(await client.wait(a.request_id, 0)).toMatchObject({ status: 'expired' });
    // An expired request is not the answer to a new identical one.
    const b = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    expect(b).toMatchObject({ status: 'pending' });
    expect(b.request_id).not.toBe(a.request_id);
  });

  it('repeated rejections put the agent on a cool-down and tell the operator it is looping', async () => {
    const d = desk();
    for (let i = 0; i < 3; i++) {
      const a = await client.propose('pipelock-block', {
        allowlist: JSON.stringify({ allow: ['registry.npmjs.org', `h${i}.example.com`] }),
        justification: WHY,
      });
      await d.reject(a.request_id, 'no', { by: 'alice', via: 'cli' });
      now += 1000;
    }
    expect((await d.list()).at(-1)!.rejections).toBe(3);
    const err = await askToAllow(client, 'x.example.com').catch((e) => e);
    expect(isBbError(err, 'CONFLICT')).toBe(true);
    expect((err as Error).message).toMatch(/you are looping/);
    now += 10 * 60_000;
    expect(
      await client.propose('pipelock-block', {
        allowlist: JSON.stringify({ allow: ['x.example.com'] }),
        justification: WHY,
      }),
    ).toMatchObject({ status: 'pending' });
  });

  it('a file the tool does not name is routed by its content; a bad file never reaches the operator', async () => {
    const routes = JSON.stringify({
      routes: [{ prefix: '/svc', upstream: 'https://api.svc.test', headers: {} }],
    });
    const a = await client.propose('pipelock-block', { allowlist: routes, justification: WHY });
    expect(a.kind).toBe('routes');
    expect(await desk().show(a.request_id)).toMatchObject({
      kind: 'routes',
      rerouted: true,
      tool: 'pipelock-block',
    });
    const bad = await client
      .propose('capability-block', {
        dockerfile: 'FROM evil:1\n',
        justification: 'I need the evil image',
      })
      .catch((e) => e);
    expect(isBbError(bad, 'INVALID_INPUT')).toBe(true);
    const same = await client
      .propose('pipelock-block', { allowlist: ALLOW, justification: WHY })
      .catch((e) => e);
    expect((same as Error).message).toMatch(/already runs with/);
    expect(await desk().list()).toHaveLength(1);
  });

  it('the agent cannot decide: its sidecar has no way to approve, reject or cancel', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    for (const method of ['approve', 'reject', 'cancel', 'decide'])
      await expect(client.call(method, { request_id: a.request_id })).rejects.toThrow(
        /Method not found/,
      );
    // Nor can it forge a decision: the host never reads the exchange's decisions, only writes them.
    expect((await desk().show(a.request_id)).status).toBe('pending');
  });

  it('two approvals of the same file at once: the first applies, the second is checked against it', async () => {
    const a = await askToAllow(client, 'pypi.org');
    const b = await askToAllow(client, 'files.pythonhosted.org');
    const d = desk();
    applyMs = 50;
    const [x, y] = await Promise.allSettled([
      d.approve(a.request_id, { by: 'alice', via: 'cli' }),
      d.approve(b.request_id, { by: 'bob', via: 'cli' }),
    ]);
    expect(x).toMatchObject({ status: 'fulfilled', value: { remediation: { ok: true } } });
    // Both were made from the same allowlist: applying the second would drop the first.
    expect(y.status).toBe('rejected');
    expect(String((y as PromiseRejectedResult).reason)).toMatch(/changed since the agent proposed/);
    expect(applied.map((p) => JSON.parse(p.text).allow)).toEqual([['pypi.org']]);
  });

  it('an allowlist and a routes approval at once reload the proxies one after the other', async () => {
    const a = await askToAllow(client, 'pypi.org');
    const b = await client.propose('cred-proxy-block', {
      routes: JSON.stringify({
        routes: [{ prefix: '/pypi', upstream: 'https://pypi.org/simple', headers: {} }],
      }),
      justification: WHY,
    });
    const d = desk();
    applyMs = 50;
    const outcomes = await Promise.all([
      d.approve(a.request_id, { by: 'alice', via: 'cli' }),
      d.approve(b.request_id, { by: 'bob', via: 'cli' }),
    ]);
    expect(outcomes.map((o) => o.remediation?.ok)).toEqual([true, true]);
    // Never two reloads of one bottle's proxies at once.
    expect(overlapped).toBe(false);
  });

  it('a bottle cannot flood the host with requests', async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 5; i++)
      ids.add(
        (
          await client.propose('pipelock-block', {
            allowlist: JSON.stringify({ allow: [`h${i}.example.com`] }),
            justification: WHY,
          })
        ).request_id,
      );
    expect(ids.size).toBe(5);
    const err = await askToAllow(client, 'h9.example.com').catch((e) => e);
    expect(isBbError(err, 'CONFLICT')).toBe(true);
    expect((err as Error).message).toMatch(/5 of your requests already wait/);
    expect(await desk().list()).toHaveLength(5);
  });

  it('a remediation that fails tells the agent so and is recorded', async () => {
    const a = await client.propose('pipelock-block', { allowlist: WANT, justification: WHY });
    failApply = true;
    const out = await desk().approve(a.request_id, { by: 'alice', via: 'cli' });
    expect(out.remediation).toMatchObject({ ok: false, detail: 'the proxy did not answer' });
    expect(await client.wait(a.request_id, 0)).toMatchObject({
      status: 'cancelled',
      reason: expect.stringMatching(/applying it failed: the proxy did not answer/),
    });
  });
});
