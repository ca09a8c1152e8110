// The supervise plane on the forge thread: a pending request is posted once on its
// bottle's issue; a repository admin (or a named decider) decides it with a reply;
// the bot, strangers and writers who may not decide are ignored, and no `/bb`
// reply wakes the agent.
import { MemoryForge } from '@bb/forge/testing';
import type { RequestView } from '@bb/supervise';
import { describe, expect, it } from 'vitest';
import type { OrchestratorOptions, SupervisePlane } from '../src/index';
import { parseThreadCommand } from '../src/supervise-thread';
import { OWNER, REPO, setup, until } from './orchestrator-setup';

const ID = 'sr_abcdefghij0123456789';

function desk(
  slugOf: () => string,
  diff = '--- allowlist.json\n+++ allowlist.json\n+  "pypi.org"',
  findings = [{ severity: 'info', code: 'host-new', message: 'a new host: pypi.org' }],
) {
  const decided: Array<{
    verb: string;
    id: string;
    by: string;
    via?: string;
    scope?: string;
    expect?: unknown;
    reason?: string;
    edited?: string;
  }> = [];
  let status = 'pending';
  const view = (): RequestView =>
    ({
      id: ID,
      slug: slugOf(),
      kind: 'allowlist',
      tool: 'pipelock-block',
      status,
      justification: 'pip needs pypi.org. @alice #1 <b>hi</b>',
      candidateHash: 'c'.repeat(64),
      baseHash: 'b'.repeat(64),
      diff,
      findings,
      beyondCeiling: [],
    }) as unknown as RequestView;
  const plane: SupervisePlane = {
    awaitingOperator: () => status === 'pending',
    list: async () => (status === 'pending' && slugOf() ? [view()] : []),
    show: async (id) => {
      if (id !== ID) throw new Error('no such request');
      return view();
    },
    approve: async (id, d) => {
      decided.push({ verb: 'approve', id, ...d });
      status = 'approved';
      return {
        request: { ...view(), status: 'approved', scope: d.scope ?? 'turn' },
        remediation: { ok: true, detail: 'reloaded' },
      } as never;
    },
    reject: (id, reason, who) => {
      decided.push({ verb: 'reject', id, ...who, reason });
      status = 'rejected';
    },
  };
  return { plane, decided };
}

/**
 * A bottle at work on an issue whose requests come from a fake desk: the setup, the
 * desk, the issue and a reader of its comments. alice administers the repository.
 */
async function atWork(
  over: Partial<OrchestratorOptions> = {},
  findings?: Parameters<typeof desk>[2],
) {
  let slug = '';
  const d = desk(() => slug, undefined, findings);
  const t = setup({ supervise: d.plane, superviseThreadMs: 20, ...over });
  t.world.grant(OWNER, REPO, 'alice', 'admin');
  const { n } = await t.launched();
  slug = t.slugOf(n);
  const read = () =>
    new MemoryForge({ owner: OWNER, repo: REPO, as: 'alice', world: t.world }).readComments(n);
  return { t, d, n, read };
}

describe('supervise requests on the forge thread', () => {
  it('posts a pending request once, and an admin approves it with a reply that does not wake the agent', async () => {
    const { t, d, n, read } = await atWork();
    t.orch.startWatchdog();
    await until('posted', async () => (await read()).some((c) => c.body.includes(ID)));
    await new Promise((r) => setTimeout(r, 100));
    const posted = (await read()).filter((c) => c.body.includes(`request \`${ID}\``));
    expect(posted).toHaveLength(1);
    expect(posted[0]!.author.login).toBe('bb-bot');
    // The agent's words are shown as its words: no mention, reference or HTML goes through.
    expect(posted[0]!.body).toContain('`@alice`');
    expect(posted[0]!.body).toContain('`#1`');
    expect(posted[0]!.body).not.toContain('<b>');
    expect(posted[0]!.body).toMatch(/```diff\n[^`]*"pypi\.org"/);
    expect(posted[0]!.body).toContain(`/bb approve ${ID}`);

    const turnsBefore = t.runner.calls.length;
    await t.orch.accept(
      t.ev.comment(n, `/bb approve ${ID} --scope bottle`, undefined, { on: 'issue' }),
    );
    await until('decided', () => d.decided.length === 1);
    expect(d.decided[0]).toMatchObject({
      verb: 'approve',
      id: ID,
      by: 'forge:alice',
      via: 'forge',
      scope: 'bottle',
      expect: { candidateHash: 'c'.repeat(64) },
    });
    await until('answered', async () =>
      (await read()).some((c) => c.body.startsWith(`Approved \`${ID}\``)),
    );
    // A decision is not a message to the agent: nothing was resumed or queued.
    expect(t.runner.calls.slice(turnsBefore).filter((c) => c.startsWith('resume'))).toEqual([]);
  });

  it('ignores /bb from the bot, from writers who are not admins and from strangers; names the deciders when asked', async () => {
    let slug = '';
    const d = desk(() => slug);
    const t = setup({ supervise: d.plane });
    const { n } = await t.launched();
    slug = t.slugOf(n);
    const as = (author: string, body: string) =>
      t.ev.comment(n, body, undefined, { author, on: 'issue' });
    // alice may write, not administer: not a decider by default.
    await t.orch.accept(as('alice', `/bb approve ${ID}`));
    await t.orch.accept(as('bb-bot', `/bb approve ${ID}`));
    await t.orch.accept(as('mallory', `/bb reject ${ID} no`));
    await new Promise((r) => setTimeout(r, 100));
    expect(d.decided).toEqual([]);
    const ignored = t.logs.filter((l) => l['msg'] === 'supervise command ignored');
    expect(ignored.map((l) => l['author'])).toEqual(['alice', 'bb-bot', 'mallory']);
    expect(t.runner.calls.filter((c) => c.startsWith('resume'))).toEqual([]);

    // A named decider may, and must give a reason to reject.
    const named = setup({ supervise: d.plane, superviseDeciders: ['carol'] });
    const { n: m } = await named.launched();
    slug = named.slugOf(m);
    const by = (author: string, body: string) =>
      named.ev.comment(m, body, undefined, { author, on: 'issue' });
    await named.orch.accept(by('carol', `/bb reject ${ID}`));
    await named.orch.accept(by('carol', `/bb reject ${ID} not pypi, use the mirror`));
    await until('rejected', () => d.decided.length === 1);
    expect(d.decided[0]).toMatchObject({
      verb: 'reject',
      by: 'forge:carol',
      via: 'forge',
      reason: 'not pypi, use the mirror',
    });
  });

  it('posts a request again when the forge failed; a change too long to show is not approved on the thread', async () => {
    let slug = '';
    const long = `--- a\n+++ b\n${Array.from({ length: 300 }, (_, i) => `+  "host${i}.example"`).join('\n')}`;
    const d = desk(() => slug, long);
    const t = setup({ supervise: d.plane, superviseThreadMs: 20, superviseDeciders: ['Carol'] });
    const { n } = await t.launched();
    slug = t.slugOf(n);
    // The forge refuses the first post: it is tried again.
    let failures = 1;
    t.setForge((owner, repo) => {
      const f = new MemoryForge({ owner, repo, as: 'bb-bot', world: t.world });
      const post = f.postComment.bind(f);
      f.postComment = async (i, body) => {
        if (failures-- > 0) throw new Error('forge down');
        return post(i, body);
      };
      return f;
    });
    t.orch.startWatchdog();
    const read = () =>
      new MemoryForge({ owner: OWNER, repo: REPO, as: 'alice', world: t.world }).readComments(n);
    await until('posted after the failure', async () =>
      (await read()).some((c) => c.body.includes(ID)),
    );
    const posted = (await read()).find((c) => c.body.includes(ID))!.body;
    expect(posted).toContain('too long to show here in full');
    expect(posted).not.toContain('host299.example');
    // A named decider, whatever the case of the login: the approval is refused all the same.
    await t.orch.accept(
      t.ev.comment(n, `/bb approve ${ID}`, undefined, { author: 'carol', on: 'issue' }),
    );
    await until('answered', async () =>
      (await read()).some((c) => c.body.includes('is not approved here')),
    );
    expect(d.decided).toEqual([]);
  });

  it('takes a modified file from a code block in the reply, bound to the proposal that was posted', async () => {
    const { t, d, n, read } = await atWork();
    const mine = '{\n  "allow": ["pypi.org:443"]\n}\n';
    await t.orch.accept(
      t.ev.comment(
        n,
        `/bb modify ${ID}\nOnly TLS, please:\n\n\`\`\`json\n${mine}\`\`\`\n`,
        undefined,
        {
          on: 'issue',
        },
      ),
    );
    await until('decided', () => d.decided.length === 1);
    expect(d.decided[0]).toMatchObject({
      verb: 'approve',
      id: ID,
      by: 'forge:alice',
      via: 'forge',
      edited: mine,
      expect: { candidateHash: 'c'.repeat(64) },
    });
    await until('answered', async () =>
      (await read()).some((c) => c.body.startsWith(`Approved, as modified, \`${ID}\``)),
    );
    // Without the file, nothing is decided and the reply says what is missing.
    await t.orch.accept(t.ev.comment(n, `/bb modify ${ID}`, undefined, { on: 'issue' }));
    await until('told', async () =>
      (await read()).some((c) => c.body.includes('carries the whole new file in a code block')),
    );
    expect(d.decided).toHaveLength(1);
  });

  it('auto mode approves a harmless request at once and says so on the issue; a dangerous one waits for a person', async () => {
    const { t, d, read } = await atWork({ superviseAuto: true });
    t.orch.startWatchdog();
    await until('decided', () => d.decided.length === 1);
    expect(d.decided[0]).toMatchObject({
      verb: 'approve',
      id: ID,
      by: 'auto',
      expect: { candidateHash: 'c'.repeat(64) },
    });
    await until('announced', async () =>
      (await read()).some((c) => c.body.startsWith('**Approved automatically**')),
    );
    expect((await read()).some((c) => c.body.includes(`/bb approve ${ID}`))).toBe(false);

    const risky = await atWork({ superviseAuto: true }, [
      { severity: 'high', code: 'internal-address', message: '10.0.0.5 is a private address' },
    ]);
    risky.t.orch.startWatchdog();
    await until('posted for a person', async () =>
      (await risky.read()).some((c) => c.body.includes(`/bb approve ${ID}`)),
    );
    expect(risky.d.decided).toEqual([]);
  });

  it('lists at most 20 findings, and stops posting a comment the forge keeps refusing', async () => {
    const many = Array.from({ length: 25 }, (_, i) => ({
      severity: 'info',
      code: 'host-new',
      message: `h${i}.example is a new host`,
    }));
    let slug = '';
    const d = desk(() => slug, undefined, many);
    const t = setup({ supervise: d.plane, superviseThreadMs: 5 });
    const { n } = await t.launched();
    slug = t.slugOf(n);
    const bodies: string[] = [];
    t.setForge((owner, repo) => {
      const f = new MemoryForge({ owner, repo, as: 'bb-bot', world: t.world });
      f.postComment = async (_i, body) => {
        bodies.push(body);
        throw new Error('422: the comment is refused');
      };
      return f;
    });
    t.orch.startWatchdog();
    await until(
      'given up',
      () => t.logs.some((l) => l['msg'] === 'gave up posting a supervise request'),
      10_000,
    );
    expect(bodies).toHaveLength(30);
    expect(bodies[0]).toContain('h19.example');
    expect(bodies[0]).not.toContain('h20.example');
    expect(bodies[0]).toContain(`… and 5 more (\`bb supervise show ${ID}\`)`);
    await new Promise((r) => setTimeout(r, 100));
    expect(bodies).toHaveLength(30);
  });

  it('reads only the commands it knows', () => {
    expect(parseThreadCommand(`/bb modify ${ID} --scope bottle\n~~~\na\nb\n~~~`)).toEqual({
      verb: 'modify',
      id: ID,
      file: 'a\nb\n',
      scope: 'bottle',
    });
    expect(parseThreadCommand(`/bb modify ${ID}\nno block here`)).toHaveProperty('error');
    // As a browser sends it: the file comes with LF line ends.
    expect(
      parseThreadCommand(`/bb modify ${ID}\r\n\`\`\`\r\nFROM x\r\nRUN y\r\n\`\`\`\r\n`),
    ).toEqual({
      verb: 'modify',
      id: ID,
      file: 'FROM x\nRUN y\n',
    });
    expect(
      parseThreadCommand(`/bb modify ${ID}\n\`\`\`\n${'x'.repeat(20_001)}\n\`\`\``),
    ).toHaveProperty('error');
    expect(parseThreadCommand(`/bb approve ${ID}`)).toEqual({ verb: 'approve', id: ID });
    expect(parseThreadCommand(`/bb approve ${ID} --scope turn`)).toEqual({
      verb: 'approve',
      id: ID,
      scope: 'turn',
    });
    expect(parseThreadCommand(`/bb approve ${ID} --scope manifest`)).toHaveProperty('error');
    expect(parseThreadCommand(`/bb approve ${ID} --override`)).toHaveProperty('error');
    expect(parseThreadCommand('/bb approve sr_short')).toHaveProperty('error');
    expect(parseThreadCommand(`/bb reject ${ID}`)).toHaveProperty('error');
    expect(parseThreadCommand(`/bb reject ${ID} too broad\nsee the docs`)).toEqual({
      verb: 'reject',
      id: ID,
      reason: 'too broad\nsee the docs',
    });
    expect(parseThreadCommand('/bb destroy')).toHaveProperty('error');
  });
});
