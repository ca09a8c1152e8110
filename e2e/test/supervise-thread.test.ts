// Supervise decided where the people are, on real Docker through the service: a
// script agent in a real bottle asks for a host on its allowlist with
// $BB_SUPERVISE and waits; the orchestrator posts the request on the issue; a
// writer who is not an admin replies `/bb approve` and is ignored; an admin's
// reply approves it; the proxy reloads and the same turn carries on. The
// decision is recorded as made on the forge by that admin.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { acmeWorld, createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend } from '@bb/headless';
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

describe.skipIf(!docker.ok)('supervise on the forge thread, through the service', () => {
  let home: string;
  let gitea: GiteaTestServer;
  let orch: RunningOrchestrator;
  const backend = new DockerBackend();

  beforeAll(async () => {
    home = makeHome(
      'bb-supervise-thread-',
      {
        implementer: scriptAgent([
          {
            steps: [
              {
                do: 'sh',
                cmd: `printf '{"allow":["registry.npmjs.org","pypi.org"]}\\n' > /tmp/allow.json`,
              },
              // Waits for the decision; a refusal or a timeout fails the turn.
              {
                do: 'sh',
                cmd: `$BB_SUPERVISE pipelock-block --file /tmp/allow.json --why 'pip needs pypi.org for the tests' --wait 100`,
              },
              { do: 'done', status: 'success', summary: 'Got pypi.org.' },
            ],
          },
        ]),
      },
      {
        // Proxies running from the start (a bottle with no allowlist cannot be unblocked yet).
        default: { image: BASE_IMAGE, egress: { allow: ['registry.npmjs.org'] } },
      },
    );
    // The operator's ceiling lets pypi.org be granted without an override.
    writeFileSync(
      join(home, 'config', 'supervise.json'),
      JSON.stringify({ egressCeiling: ['pypi.org'] }),
    );
    gitea = await createGiteaTestServer({
      // alice administers the repository; mallory may only write to it.
      world: acmeWorld(TOKEN, {
        aliceToken: 'alice-token-thread-0001',
        users: [{ login: 'mallory', tokens: ['mallory-token-thread-0001'] }],
        collaborators: ['mallory'],
        admins: ['bb-claude', 'alice'],
      }),
    });
    orch = await serveFor({ home, gitea, token: TOKEN, secret: SECRET, backend });
  }, 60_000);

  afterAll(async () => {
    await orch?.close();
    await gitea?.close();
    await destroyHome(home, backend);
  });

  it('posts the request on the issue; an admin approves it by replying, a mere writer cannot', async () => {
    const n = fileIssue(gitea, 'implementer', 'Make the tests install', 'They need pypi.org.');
    const bodies = () => gitea.issue('acme/widgets', n).comments.map((c) => c.body);
    const posted = await until(
      'the request on the issue',
      () => bodies().find((b) => ID.test(b)),
      90_000,
    );
    const id = ID.exec(posted)![1]!;
    expect(posted).toContain('pipelock-block');
    expect(posted).toContain('pip needs pypi.org for the tests');
    expect(posted).toMatch(/```diff[\s\S]*pypi\.org/);
    expect(gitea.issue('acme/widgets', n).comments.find((c) => c.body === posted)?.author).toBe(
      'bb-claude',
    );

    const store = () => new SuperviseStore(BbDatabase.open({ path: join(home, 'bot-bottle.db') }));
    // A writer who is not an admin: ignored, the request still waits.
    gitea.comment('mallory', 'acme/widgets', n, `/bb approve ${id}`);
    await gitea.settle();
    await new Promise((r) => setTimeout(r, 1500));
    expect(store().get(id)?.status).toBe('pending');

    gitea.comment('alice', 'acme/widgets', n, `/bb approve ${id}`);
    await until('the answer on the thread', () =>
      bodies().find((b) => b.startsWith(`Approved \`${id}\``)),
    );
    const decided = store().get(id)!;
    expect(decided).toMatchObject({ status: 'approved', decidedBy: 'forge:alice', scope: 'turn' });
    expect(decided.remediation, JSON.stringify(decided.remediation)).toMatchObject({ ok: true });
    // The agent's wait returned approved, so its turn went on to signal done.
    const done = await until(
      'the turn to end',
      async () => {
        const r = (await fetch(`${orch.url}/api/bottles`).then((x) => x.json())) as {
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
});
