// A second forge kind, from the public API alone (./lab-forge), runs the whole loop in
// real bottles through the service: Lab's signed webhook in, a bottle whose sidecar
// (loading the kind from its bundled module) writes to Lab, a change (PR) opened from a
// real push, a comment that resumes the same session, closing the change destroys it.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bottleDir, DockerBackend, HOME_LABEL, homeLabel } from '@bb/headless';
import { type RunningOrchestrator, serve } from '@bb/service';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { build } from 'tsup';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { labKind } from './lab-forge/kind';
import { LabServer } from './lab-forge/server';
import {
  makeHome,
  prTurn,
  rememberTurn,
  removeHome,
  scriptAgent,
  serviceBottle,
  until,
} from './support';

const docker = await probeDocker();
const TOKEN = 'lab-bot-token-5150';
const SECRET = 'lab-webhook-secret';
const ENTRY = fileURLToPath(new URL('./lab-forge/entry.ts', import.meta.url));

/** The kind as one ES module, the way its author would ship it for bottles. */
async function bundleKind(dir: string): Promise<string> {
  await build({
    entry: { 'lab-kind': ENTRY },
    outDir: dir,
    format: ['esm'],
    platform: 'node',
    target: 'node20',
    noExternal: [/.*/],
    splitting: false,
    dts: false,
    silent: true,
    config: false,
    outExtension: () => ({ js: '.mjs' }),
    esbuildOptions(o) {
      o.conditions = ['@bb/source'];
    },
  });
  return join(dir, 'lab-kind.mjs');
}

describe.skipIf(!docker.ok)('a second forge kind (Lab) end to end in real bottles', () => {
  let home: string;
  let out: string;
  let lab: LabServer;
  let orch: RunningOrchestrator;
  const logs: Array<Record<string, unknown>> = [];
  const backend = new DockerBackend();

  beforeAll(async () => {
    home = makeHome('bb-lab-', {
      implementer: scriptAgent([
        prTurn({
          pr: { content: 'fixed on Lab\n', message: 'Fix on Lab', title: 'Fix the lab thing' },
          comment: 'Change is up.',
          summary: 'Opened the change.',
        }),
        rememberTurn(),
      ]),
    });
    out = mkdtempSync(join(tmpdir(), 'bb-lab-kind-'));
    const module = await bundleKind(out);
    lab = await LabServer.start();
    lab.addUser('alice', 'alice-lab-token');
    lab.addUser('bb-bot', TOKEN);
    lab.world.addMember('bot-bottle', 'bb-bot');
    await lab.addRepo('acme', 'widgets', { 'README.md': '# widgets\n' });
    lab.world.grant('acme', 'widgets', 'bb-bot', 'admin');
    lab.world.grant('acme', 'widgets', 'alice', 'write');
    orch = await serve({
      env: {
        BB_HOME: home,
        BB_BASE_IMAGE: BASE_IMAGE,
        BB_PORT: '0',
        FORGE_LAB_URL: lab.url,
        FORGE_TOKEN: TOKEN,
        FORGE_WEBHOOK_SECRET: SECRET,
        BB_SWEEP_INTERVAL: '0',
        BB_WARM_WINDOW: '0',
      },
      kind: labKind(module),
      backend,
      logStream: {
        write: (line: string) => {
          logs.push(JSON.parse(line) as Record<string, unknown>);
          return true;
        },
      } as unknown as NodeJS.WritableStream,
    });
    lab.hooks.push({ url: `${orch.url}/webhooks/lab`, secret: SECRET });
  }, 120_000);

  afterAll(async () => {
    await orch?.close();
    await lab?.close();
    for (const c of await backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) }))
      await backend.destroy(c.id);
    rmSync(out, { recursive: true, force: true });
    await removeHome(home);
  });

  it('issue → bottle → change → frozen → comment → resumed → closed → destroyed', async () => {
    onTestFailed(() => console.error('orchestrator log:', JSON.stringify(logs, null, 1)));
    // What the service's own API says of the issue's bottle.
    const bottle = (issue: number) => serviceBottle(orch.url, issue);
    const n = await lab.openIssue('alice', 'acme', 'widgets', {
      title: 'Fix the lab thing',
      body: 'It is broken on Lab.',
      labels: ['bot-bottle:implementer'],
      assignees: ['bb-bot'],
    });
    expect(lab.deliveries.at(-1)).toEqual({ type: 'issue.opened', status: 202 });
    const frozen = await until(
      'the first turn to end frozen with a change',
      async () => {
        const row = await bottle(n);
        return row?.status === 'frozen' && row.prNumber ? row : undefined;
      },
      90_000,
    );
    const pr = frozen.prNumber!;
    const change = lab.world.repo('acme', 'widgets').items.get(pr)!.pr!;
    // Opened by the bot from its bottle branch, from a commit it really pushed.
    expect(change.author.login).toBe('bb-bot');
    expect(change.head.ref).toBe(`bb/implementer-${n}`);
    expect(change.head.sha).toMatch(/^[0-9a-f]{40}$/);
    expect(lab.world.repo('acme', 'widgets').branches.get(change.head.ref)).toBe(change.head.sha);
    const issueComments = () =>
      lab.world
        .repo('acme', 'widgets')
        .items.get(n)!
        .comments.map((c) => `${c.author.login}: ${c.body}`);
    expect(issueComments()).toContain('bb-bot: Change is up.');
    // Every write went through Lab's API or git as the bot, with its token.
    const writes = lab.calls.filter((c) => /postComment|openPr|git-receive-pack/.test(c.path));
    expect(writes.length).toBeGreaterThanOrEqual(3);
    for (const w of writes) expect(w).toMatchObject({ user: 'bb-bot', status: 200 });
    expect(lab.calls.some((c) => c.path.endsWith('/git-receive-pack'))).toBe(true);
    // The bottle's sidecar had the kind from its bundle, not from anything built in.
    expect(existsSync(join(home, 'runtime', 'forge-kind-lab.mjs'))).toBe(true);

    // A person's comment on the change resumes the same session.
    await lab.comment('alice', 'acme', 'widgets', pr, 'Please also handle empty widgets.');
    await until(
      'the resumed turn',
      async () =>
        issueComments().some((c) => c.includes('Turn 2: I remember')) ? true : undefined,
      90_000,
    );
    await until('the bottle to freeze again', async () =>
      (await bottle(n))?.status === 'frozen' ? true : undefined,
    );
    expect((await bottle(n))?.sessionId).toBe(frozen.sessionId);

    // Closing the change destroys the bottle.
    await lab.closeChange('alice', 'acme', 'widgets', pr);
    await until('the bottle to be destroyed', async () =>
      (await bottle(n))?.status === 'destroyed' ? true : undefined,
    );
    expect(await backend.list({ 'bb.slug': frozen.slug })).toEqual([]);
    expect(existsSync(bottleDir(frozen.slug, { BB_HOME: home }))).toBe(false);
    expect(lab.deliveries.every((d) => d.status === 202)).toBe(true);
    expect(logs.some((l) => String(l['msg']).startsWith('event failed'))).toBe(false);
  }, 240_000);
});
