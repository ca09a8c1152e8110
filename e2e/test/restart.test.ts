// The orchestrator as a real process (`bb-orchestrator`) on a real Docker engine,
// killed and restarted: 50 concurrent deliveries for one issue make one bottle;
// kill -9 mid-run leaves no orphan, no second bottle and no duplicate comment;
// SIGTERM leaves the running bottle running; changes Gitea never delivered
// (it does not retry) are caught by the REST sweep after a restart.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createWriteStream, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { DockerBackend, HOME_LABEL, homeLabel } from '@bb/headless';
import { MANAGED_LABEL } from '@bb/lifecycle';
import { ProvenanceStore } from '@bb/provenance';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fileIssue,
  forgeWorld,
  makeHome,
  prTurn,
  rememberTurn,
  scriptAgent,
  until,
} from './support';

const docker = await probeDocker();
const TOKEN = 'bb-claude-token-restart-5150';
const SECRET = 'restart-webhook-secret';
const MAIN = fileURLToPath(new URL('../../apps/orchestrator/dist/main.js', import.meta.url));

describe.skipIf(!docker.ok)('real Docker: the orchestrator process, killed and restarted', () => {
  let home: string;
  let gitea: GiteaTestServer;
  let port: number;
  let proc: ChildProcess | undefined;
  let starts = 0;
  const backend = new DockerBackend();
  const env = () => ({ BB_HOME: home });

  async function start(extra: Record<string, string> = {}): Promise<void> {
    starts++;
    const log = createWriteStream(join(home, `orchestrator-${starts}.log`));
    proc = spawn(process.execPath, [MAIN], {
      env: {
        PATH: process.env['PATH'],
        ...(process.env['DOCKER_HOST'] ? { DOCKER_HOST: process.env['DOCKER_HOST'] } : {}),
        BB_HOME: home,
        BB_BASE_IMAGE: BASE_IMAGE,
        BB_PORT: String(port),
        FORGE_GITEA_API: gitea.apiUrl,
        FORGE_TOKEN: TOKEN,
        FORGE_WEBHOOK_SECRET: SECRET,
        BB_SWEEP_INTERVAL: '1s',
        FORGE_WATCHDOG_INTERVAL: '1s',
        ...extra,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    proc.stdout!.pipe(log);
    proc.stderr!.pipe(log);
    await until('the orchestrator to listen', async () => {
      if (proc?.exitCode !== null)
        throw new Error(`the orchestrator exited: ${readFileSync(log.path, 'utf8')}`);
      return fetch(`http://127.0.0.1:${port}/healthz`).then(
        (r) => r.ok,
        () => undefined,
      );
    });
  }

  async function stop(signal: NodeJS.Signals): Promise<number | null> {
    const p = proc!;
    proc = undefined;
    if (p.exitCode !== null) return p.exitCode;
    const exited = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
    p.kill(signal);
    return exited;
  }

  // Read the orchestrator's SQLite file from the outside, as an operator would.
  const db = () => BbDatabase.open({ path: join(home, 'bot-bottle.db') });
  const row = (n: number) => {
    const d = db();
    try {
      return new SqliteForgeStateStore({ database: d }).get('acme', 'widgets', n);
    } finally {
      d.close();
    }
  };
  const chain = (slug: string) => {
    const d = db();
    try {
      return new ProvenanceStore(d).chain(slug);
    } finally {
      d.close();
    }
  };
  const comments = (n: number) => gitea.issue('acme/widgets', n).comments.map((c) => c.body);

  beforeAll(async () => {
    home = makeHome('bb-restart-', {
      implementer: scriptAgent([
        prTurn({
          before: [
            { do: 'comment', body: 'Starting.' },
            // Long enough for the test to kill the orchestrator mid-run.
            { do: 'sleep', ms: 6000 },
          ],
        }),
        rememberTurn(),
      ]),
    });
    port = await freePort();
    gitea = await createGiteaTestServer({
      world: forgeWorld(TOKEN),
      hooks: [{ url: `http://127.0.0.1:${port}/webhooks/gitea`, secret: SECRET }],
    });
  });

  afterAll(async () => {
    if (proc) await stop('SIGKILL');
    for (const c of await backend.list({ [HOME_LABEL]: homeLabel(env()) }))
      await backend.destroy(c.id);
    await gitea?.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('one bottle from 50 concurrent deliveries; kill -9, SIGTERM and missed deliveries recovered', async () => {
    // Filed while the orchestrator is down: Gitea's one delivery attempt fails.
    const a = fileIssue(gitea, 'implementer', 'Fix the thing', 'It is broken.');
    await gitea.settle();
    const original = gitea.deliveries.find((d) => d.eventType === 'issues')!;
    expect(original.status).toBeUndefined();

    // 50 concurrent redeliveries of it (each with its own UUID, as Gitea's replay does).
    await start({ BB_SWEEP_INTERVAL: '0' });
    const statuses = await Promise.all(
      Array.from({ length: 50 }, () => {
        const uuid = randomUUID();
        return fetch(`http://127.0.0.1:${port}/webhooks/gitea`, {
          method: 'POST',
          headers: {
            ...original.headers,
            'X-Gitea-Delivery': uuid,
            'X-GitHub-Delivery': uuid,
            'X-Gogs-Delivery': uuid,
          },
          body: original.body,
        }).then((r) => r.status);
      }),
    );
    expect(statuses.filter((s) => s === 202)).toHaveLength(50);
    const slug = await until('the agent to start', () =>
      comments(a).includes('Starting.') ? row(a)?.slug : undefined,
    );
    expect(readdirSync(join(home, 'bottles'))).toEqual([slug]);

    // kill -9 mid-turn; while it is down, a container of ours that no row owns appears.
    expect(await stop('SIGKILL')).toBeNull();
    const running = await backend.list({ 'bb.slug': slug });
    expect(running.find((c) => c.labels['bb.role'] === 'agent')?.state).toBe('running');
    const ghost = await backend.create({
      name: `bb-ghost-${randomUUID().slice(0, 8)}-agent`,
      image: BASE_IMAGE,
      cmd: ['sleep', '300'],
      labels: {
        ...MANAGED_LABEL,
        [HOME_LABEL]: homeLabel(env()),
        'bb.slug': 'ghost-00000',
        'bb.role': 'agent',
      },
      network: 'none',
    });
    await backend.start(ghost);

    await start();
    const frozen = await until('the reattached turn to end frozen with a PR', () => {
      const r = row(a);
      return r?.status === 'frozen' && r.prNumber ? r : undefined;
    });
    expect(frozen.slug).toBe(slug);
    expect(await backend.inspect(ghost)).toBeUndefined();
    // Kept warm for its next turn: its agent's and gate's containers, both paused.
    expect((await backend.list({ 'bb.slug': slug })).map((c) => c.state)).toEqual([
      'paused',
      'paused',
    ]);
    expect(readdirSync(join(home, 'bottles'))).toEqual([slug]);
    expect(comments(a).filter((c) => c === 'Starting.')).toHaveLength(1);
    expect(comments(a).filter((c) => c === 'PR is up.')).toHaveLength(1);
    const first = chain(slug);
    expect(first).toHaveLength(1);
    expect(first[0]!.record.done).toEqual({ status: 'success', summary: 'Opened the PR.' });
    expect(first[0]!.record.gitCommit).toMatch(/^[0-9a-f]{40}$/);

    // SIGTERM: a clean exit. While it is down, a human comments on the PR and a
    // second issue is filed; neither delivery arrives.
    expect(await stop('SIGTERM')).toBe(0);
    // A clean stop cools what it kept warm: nothing stays paused with nobody to resume it.
    expect(await backend.list({ 'bb.slug': slug })).toEqual([]);
    const pr = frozen.prNumber!;
    gitea.comment('alice', 'acme/widgets', pr, 'Please also handle empty widgets.');
    const b = fileIssue(gitea, 'implementer', 'Second thing', 'Also broken.');
    await gitea.settle();
    await start();
    await until('the sweep to resume the first bottle', () =>
      chain(slug).length === 2 ? true : undefined,
    );
    expect(comments(a).at(-1)).toContain('Turn 2: I remember');
    // The second issue's agent is mid-turn: SIGTERM leaves it running.
    const slugB = await until('the sweep to launch the second issue', () =>
      comments(b).includes('Starting.') ? row(b)?.slug : undefined,
    );
    expect(await stop('SIGTERM')).toBe(0);
    const agentB = (await backend.list({ 'bb.slug': slugB })).find(
      (c) => c.labels['bb.role'] === 'agent',
    );
    expect(agentB?.state).toBe('running');
    expect(row(b)?.status).toBe('running');

    // Merged while it is down: the sweep destroys that bottle, and the running
    // one is reattached and finishes its turn.
    await gitea.mergePr('alice', 'acme/widgets', pr);
    await gitea.settle();
    await start();
    await until('the sweep to destroy the merged bottle', () =>
      row(a)?.status === 'destroyed' ? true : undefined,
    );
    expect(existsSync(join(home, 'bottles', slug))).toBe(false);
    expect(chain(slug)).toHaveLength(2);
    const b2 = await until('the reattached second bottle to freeze with a PR', () => {
      const r = row(b);
      return r?.status === 'frozen' && r.prNumber ? r : undefined;
    });
    expect(b2.slug).toBe(slugB);
    expect(chain(slugB)).toHaveLength(1);
    expect(chain(slugB)[0]!.record.done).toEqual({ status: 'success', summary: 'Opened the PR.' });
    expect(comments(b).filter((c) => c === 'Starting.')).toHaveLength(1);
    expect(await stop('SIGTERM')).toBe(0);

    // The token is in no log line of any run.
    for (let i = 1; i <= starts; i++)
      expect(readFileSync(join(home, `orchestrator-${i}.log`), 'utf8')).not.toContain(TOKEN);
  }, 240_000);
});
