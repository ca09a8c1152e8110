// Supervise decided where the people are, on real Docker through the service: a
// script agent in a real bottle asks for a host on its allowlist with
// $BB_SUPERVISE and waits; the orchestrator posts the request on the issue; a
// writer who is not an admin replies `/bb approve` and is ignored; an admin's
// reply approves it; the proxy reloads and the same turn carries on. The
// decision is recorded as made on the forge by that admin. `/bb modify` approves
// the admin's own file in the agent's place; auto mode approves a harmless request
// by itself and leaves a risky one to a person.

import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '@bb/cli';
import { acmeWorld, createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend, readMeta } from '@bb/headless';
import { ProvenanceStore } from '@bb/provenance';
import type { RunningOrchestrator } from '@bb/service';
import { BbDatabase } from '@bb/state';
import { SuperviseStore } from '@bb/supervise';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destroyHome, fileIssue, makeHome, scriptAgent, serveFor, until } from './support';

const docker = await probeDocker();
const TOKEN = 'bb-claude-token-thread-93ab';
const SECRET = 'supervise-thread-webhook-secret';
const ID = /request `(sr_[a-z0-9]{20})`/;

/** A script agent that asks for `host` with $BB_SUPERVISE, waits for the answer, and is done. */
const asksFor = (host: string) =>
  scriptAgent([
    {
      steps: [
        {
          do: 'sh',
          cmd: `printf '{"allow":["registry.npmjs.org","${host}"]}\\n' > /tmp/allow.json`,
        },
        // Waits for the decision; a refusal or a timeout fails the turn.
        {
          do: 'sh',
          cmd: `$BB_SUPERVISE pipelock-block --file /tmp/allow.json --why 'pip needs ${host} for the tests' --wait 100`,
        },
        { do: 'done', status: 'success', summary: `Got ${host}.` },
      ],
    },
  ]);

/**
 * The service on real Docker with these agents, a test forge where alice administers
 * acme/widgets and mallory may only write to it, and a ceiling that lets pypi.org in.
 */
function threadWorld(
  prefix: string,
  agents: Record<string, unknown>,
  env: Record<string, string> = {},
) {
  const w = {} as { home: string; gitea: GiteaTestServer; orch: RunningOrchestrator };
  const backend = new DockerBackend();
  beforeAll(async () => {
    w.home = makeHome(prefix, agents, {
      default: { image: BASE_IMAGE, egress: { allow: ['registry.npmjs.org'] } },
    });
    writeFileSync(
      join(w.home, 'config', 'supervise.json'),
      JSON.stringify({ egressCeiling: ['pypi.org'] }),
    );
    w.gitea = await createGiteaTestServer({
      world: acmeWorld(TOKEN, {
        aliceToken: 'alice-token-thread-0001',
        users: [{ login: 'mallory', tokens: ['mallory-token-thread-0001'] }],
        collaborators: ['mallory'],
        admins: ['bb-claude', 'alice'],
      }),
    });
    w.orch = await serveFor({
      home: w.home,
      gitea: w.gitea,
      token: TOKEN,
      secret: SECRET,
      backend,
      env,
    });
  }, 60_000);
  afterAll(async () => {
    await w.orch?.close();
    await w.gitea?.close();
    if (w.home) await destroyHome(w.home, backend);
  });
  return w;
}

describe.skipIf(!docker.ok)('supervise on the forge thread, through the service', () => {
  const w = threadWorld('bb-supervise-thread-', { implementer: asksFor('pypi.org') });
  /** An issue for the implementer, once its request is on it: the comment and its id. */
  const requested = async (title: string) => {
    const n = fileIssue(w.gitea, 'implementer', title, 'They need pypi.org.');
    const bodies = () => w.gitea.issue('acme/widgets', n).comments.map((c) => c.body);
    const posted = await until(
      'the request on the issue',
      () => bodies().find((b) => ID.test(b)),
      90_000,
    );
    return { n, bodies, posted, id: ID.exec(posted)![1]! };
  };

  it('posts the request on the issue; an admin approves it by replying, a mere writer cannot', async () => {
    const { n, bodies, posted, id } = await requested('Make the tests install');
    expect(posted).toContain('pipelock-block');
    expect(posted).toContain('pip needs pypi.org for the tests');
    expect(posted).toMatch(/```diff[\s\S]*pypi\.org/);
    expect(w.gitea.issue('acme/widgets', n).comments.find((c) => c.body === posted)?.author).toBe(
      'bb-claude',
    );

    const store = () =>
      new SuperviseStore(BbDatabase.open({ path: join(w.home, 'bot-bottle.db') }));
    // A writer who is not an admin: ignored, the request still waits.
    w.gitea.comment('mallory', 'acme/widgets', n, `/bb approve ${id}`);
    await w.gitea.settle();
    await new Promise((r) => setTimeout(r, 1500));
    expect((await store().get(id))?.status).toBe('pending');

    w.gitea.comment('alice', 'acme/widgets', n, `/bb approve ${id}`);
    await until('the answer on the thread', () =>
      bodies().find((b) => b.startsWith(`Approved \`${id}\``)),
    );
    const decided = (await store().get(id))!;
    expect(decided).toMatchObject({
      status: 'approved',
      decidedBy: 'forge:alice',
      decidedVia: 'forge',
      scope: 'turn',
    });
    expect(decided.remediation, JSON.stringify(decided.remediation)).toMatchObject({ ok: true });
    // The agent's wait returned approved, so its turn went on to signal done.
    const done = await until(
      'the turn to end',
      async () => {
        const r = (await fetch(`${w.orch.url}/api/bottles`).then((x) => x.json())) as {
          bottles: Array<{ issueNumber: number; status: string }>;
        };
        const b = r.bottles.find((x) => x.issueNumber === n);
        return b?.status === 'frozen' ? b : undefined;
      },
      60_000,
    );
    expect(done.status).toBe('frozen');
    // Nothing of the /bb replies reached the agent as a message.
    expect(bodies().filter((b) => b.includes('Got pypi.org'))).toEqual([]);
  }, 240_000);

  it("a decider's own file from a code block is approved in the agent's place, and applied", async () => {
    const { n, bodies, posted, id } = await requested('Tests again');
    expect(posted).toContain(`/bb modify ${id}`);
    const mine = '{\n  "allow": ["registry.npmjs.org", "pypi.org:443"]\n}\n';
    w.gitea.comment(
      'alice',
      'acme/widgets',
      n,
      `/bb modify ${id}\nOnly over TLS:\n\n\`\`\`json\n${mine}\`\`\`\n`,
    );
    await until('the answer on the thread', () =>
      bodies().find((b) => b.startsWith(`Approved, as modified, \`${id}\``)),
    );
    const decided = (await new SuperviseStore(
      BbDatabase.open({ path: join(w.home, 'bot-bottle.db') }),
    ).get(id))!;
    expect(decided).toMatchObject({
      status: 'modified',
      decidedBy: 'forge:alice',
      decidedVia: 'forge',
      final: mine,
    });
    expect(decided.remediation, JSON.stringify(decided.remediation)).toMatchObject({ ok: true });
  }, 240_000);
});

describe.skipIf(!docker.ok)('supervise decided remotely, through the service API', () => {
  const w = threadWorld('bb-supervise-remote-', { implementer: asksFor('pypi.org') });

  it("an operator on another machine decides with their own token; it is recorded as theirs, through the API, in the turn's record", async () => {
    const n = fileIssue(w.gitea, 'implementer', 'Tests from afar', 'They need pypi.org.');
    const posted = await until(
      'the request on the issue',
      () => w.gitea.issue('acme/widgets', n).comments.find((c) => ID.test(c.body))?.body,
      90_000,
    );
    const id = ID.exec(posted)![1]!;
    // On the orchestrator's host, once: a token for carol.
    const bb = async (env: Record<string, string>, ...args: string[]) => {
      let out = '';
      let err = '';
      const code = await runCli(args, {
        env,
        cwd: tmpdir(),
        stdout: (t) => (out += t),
        stderr: (t) => (err += t),
      });
      return { code, out, err };
    };
    const made = await bb({ BB_HOME: w.home }, 'operator', 'add', 'carol');
    expect(made.code).toBe(0);
    // On carol's machine: a BB_HOME of her own, with no bottle, no key and no database of the orchestrator's.
    const laptop = mkdtempSync(join(tmpdir(), 'bb-laptop-'));
    try {
      const carol = { BB_HOME: laptop, BB_OPERATOR_TOKEN: made.out.trim() };
      const listed = await bb(carol, 'supervise', '--server', w.orch.url, 'list', '--json');
      expect(listed.err).toBe('');
      const [row] = JSON.parse(listed.out) as Array<{ id: string; candidateHash: string }>;
      expect(row!.id).toBe(id);
      const approved = await bb(
        carol,
        'supervise',
        '--server',
        w.orch.url,
        'approve',
        id,
        '--expect',
        row!.candidateHash,
      );
      expect(approved.err).toBe('');
      expect(approved.code).toBe(0);
      expect(approved.out).toMatch(/^approved sr_\w+ .*reloaded allowlist\.json/);
      expect(readdirSync(laptop)).not.toContain('bot-bottle.db');
    } finally {
      rmSync(laptop, { recursive: true, force: true });
    }
    const db = BbDatabase.open({ path: join(w.home, 'bot-bottle.db') });
    try {
      expect(await new SuperviseStore(db).get(id)).toMatchObject({
        status: 'approved',
        decidedBy: 'carol',
        decidedVia: 'api',
      });
      // The agent's wait returned approved in the same turn, which then ended with its record.
      const record = await until(
        "the turn's record",
        () =>
          new ProvenanceStore(db)
            .list({}, 1, 10)
            .records.find((r) => r.record.supervise?.some((q) => q.id === id)),
        90_000,
      );
      expect(record.record.supervise?.find((q) => q.id === id)?.decision).toMatchObject({
        by: 'carol',
        via: 'api',
        scope: 'turn',
      });
    } finally {
      db.close();
    }
  }, 240_000);
});

/**
 * A script agent that asks for a tool with `capability-block`, hears `approved`, and
 * does not end its turn (as a model busy elsewhere would not); in the rebuilt image it
 * uses the tool. Each turn says on the issue which session it is in.
 */
const NEWTOOL = Buffer.from(
  `FROM ${BASE_IMAGE}\nUSER 0\nRUN printf '#!/bin/sh\\necho newtool-works\\n' > /usr/bin/newtool && chmod 755 /usr/bin/newtool\nUSER 1000\n`,
).toString('base64');
const ignoresTheEnd = scriptAgent([
  {
    steps: [
      { do: 'comment', body: 'First turn, in session {{session}}.' },
      { do: 'sh', cmd: `echo ${NEWTOOL} | base64 -d > /tmp/Dockerfile` },
      {
        do: 'sh',
        cmd: "$BB_SUPERVISE capability-block --file /tmp/Dockerfile --why 'the tests call newtool, which the image lacks' --wait 100",
      },
      // Told to end its turn, it carries on as if it had not heard.
      { do: 'sleep', ms: 600_000 },
    ],
  },
  {
    steps: [
      { do: 'sh', cmd: 'newtool' },
      { do: 'comment', body: 'Second turn, in session {{session}}, with newtool.' },
      { do: 'done', status: 'success', summary: 'Carried on in the rebuilt image.' },
    ],
  },
]);

describe.skipIf(!docker.ok)('a rebuild approved on the thread keeps the conversation', () => {
  const w = threadWorld(
    'bb-supervise-rebuild-',
    { builder: ignoresTheEnd },
    { BB_REBUILD_GRACE: '2' },
  );

  it('an agent that ignores the end of its turn keeps its session; the turn in the new image is tracked and recorded', async () => {
    const n = fileIssue(w.gitea, 'builder', 'Use newtool', 'The tests need newtool.');
    const bodies = () => w.gitea.issue('acme/widgets', n).comments.map((c) => c.body);
    const posted = await until(
      'the request on the issue',
      () => bodies().find((b) => ID.test(b)),
      90_000,
    );
    const id = ID.exec(posted)![1]!;
    expect(posted).toContain('capability-block');
    w.gitea.comment('alice', 'acme/widgets', n, `/bb approve ${id}`);
    const second = await until(
      'the second turn on the issue',
      () => bodies().find((b) => b.startsWith('Second turn')),
      180_000,
    );
    const first = bodies().find((b) => b.startsWith('First turn'))!;
    const session = /session (\S+)\./.exec(first)![1]!;
    // The same conversation, in the rebuilt image (newtool ran).
    expect(second).toBe(`Second turn, in session ${session}, with newtool.`);
    const db = BbDatabase.open({ path: join(w.home, 'bot-bottle.db') });
    try {
      expect(await new SuperviseStore(db).get(id)).toMatchObject({
        status: 'approved',
        decidedBy: 'forge:alice',
        decidedVia: 'forge',
        scope: 'bottle',
      });
      const slug = (await new SuperviseStore(db).get(id))!.slug;
      const chain = await until(
        'both turns recorded',
        () => {
          const c = new ProvenanceStore(db).chain(slug);
          return c.length >= 2 ? c : undefined;
        },
        90_000,
      );
      expect(chain.map((r) => r.record.turn)).toEqual([1, 2]);
      expect(chain[0]!.record.watchdogFired).toMatchObject({
        reason: 'stopped',
        detail: expect.stringContaining(id),
      });
      // The turn in the new image ended the ordinary way: done, recorded, frozen.
      expect(chain[1]!.record.done).toMatchObject({ status: 'success' });
      const meta = readMeta(slug, { BB_HOME: w.home })!;
      expect(meta.image).toMatch(/^bb-rebuilt-/);
      expect(meta.sessionId).toBe(session);
      expect(meta.turns[1]!.prompt).toContain(`approved your capability-block request ${id}`);
      // Told the task again, in case the conversation had been lost.
      expect(meta.turns[1]!.prompt).toMatch(/The task, as your turn began:[\s\S]*Use newtool/);
      const row = await until(
        'frozen',
        async () => {
          const r = (await fetch(`${w.orch.url}/api/bottles`).then((x) => x.json())) as {
            bottles: Array<{ slug: string; status: string }>;
          };
          return r.bottles.find((b) => b.slug === slug && b.status === 'frozen');
        },
        60_000,
      );
      expect(row.status).toBe('frozen');
    } finally {
      db.close();
    }
  }, 300_000);
});

describe.skipIf(!docker.ok)('supervise auto mode, through the service', () => {
  const w = threadWorld(
    'bb-supervise-auto-',
    { harmless: asksFor('pypi.org'), risky: asksFor('10.0.0.7:8080') },
    { BB_SUPERVISE_AUTO: 'on' },
  );
  const store = () => new SuperviseStore(BbDatabase.open({ path: join(w.home, 'bot-bottle.db') }));

  it('approves a harmless request at once and says so; a risky one waits for a person', async () => {
    /** Agent `agent`'s issue, once a comment on it says `what`: that comment and its request. */
    const filed = async (agent: string, what: (body: string) => boolean) => {
      const n = fileIssue(w.gitea, agent, `For ${agent}`, 'It needs a host.');
      const body = await until(
        `the comment on ${agent}'s issue`,
        () => w.gitea.issue('acme/widgets', n).comments.find((c) => what(c.body))?.body,
        90_000,
      );
      return { n, body, id: ID.exec(body)![1]! };
    };
    const harmless = await filed('harmless', (b) => b.startsWith('**Approved automatically**'));
    expect(await store().get(harmless.id)).toMatchObject({
      status: 'approved',
      decidedBy: 'auto',
      decidedVia: 'auto',
    });
    expect(harmless.body).toContain('pip needs pypi.org for the tests');

    const risky = await filed('risky', (b) => b.includes('/bb approve'));
    const other = risky.id;
    expect((await store().get(other))?.status).toBe('pending');
    // A person ends it, so the agent does not wait out its time.
    w.gitea.comment('alice', 'acme/widgets', risky.n, `/bb reject ${other} not from a bottle`);
    await until('rejected', async () =>
      (await store().get(other))?.status === 'rejected' ? true : undefined,
    );
  }, 240_000);
});
