// The bundled forge sidecar runs in the offline bottle base image (node only, no
// node_modules), and an agent container with no network at all uses it through
// the bind-mounted socket directory. The Gitea-compatible test server plays the
// forge on the host's loopback.
import { execFile } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { acmeWorld, createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { verifyOpLogFile } from '@bb/forge-sidecar';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const docker = await probeDocker();
const bundles = fileURLToPath(new URL('../../packages/forge-sidecar/dist/bundle', import.meta.url));
const TOKEN = 'bb-claude-token-in-sidecar-only-91c2';

describe.skipIf(!docker.ok)(
  'real Docker: the bundled forge sidecar in the bottle base image',
  () => {
    const client = new Docker();
    let server: GiteaTestServer;
    let dir: string;
    const containers: Docker.Container[] = [];

    beforeAll(async () => {
      server = await createGiteaTestServer({
        world: acmeWorld(TOKEN, {
          issues: [
            {
              repo: 'acme/widgets',
              title: 'Fix the thing',
              author: 'alice',
              assignees: ['bb-claude'],
            },
            { repo: 'acme/widgets', title: 'Not for the bot', author: 'alice' },
          ],
        }),
      });
      dir = mkdtempSync(join(tmpdir(), 'bb-bottle-'));
      for (const d of ['sock', 'queue', 'state', 'workspace']) mkdirSync(join(dir, d));
      await run('git', ['clone', '-q', server.cloneUrl('acme/widgets'), join(dir, 'workspace')], {
        env: { ...process.env, HOME: dir },
      });
      await run('git', ['-C', join(dir, 'workspace'), 'remote', 'remove', 'origin']);
      if (process.getuid?.() === 0) {
        for (const d of ['sock', 'queue', 'state']) chownSync(join(dir, d), 1000, 1000);
        await run('chown', ['-R', '1000:1000', join(dir, 'workspace')]);
      }
      chmodSync(join(dir, 'sock'), 0o700);
    });

    afterAll(async () => {
      for (const c of containers) await c.remove({ force: true }).catch(() => {});
      await server?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('serves a networkless agent container; the token stays in the sidecar', async () => {
      // The sidecar container reaches the forge on the host's loopback; the agent has no network.
      const sidecar = await client.createContainer({
        Image: BASE_IMAGE,
        Cmd: ['node', '/opt/bb/sidecar.mjs'],
        User: '1000:1000',
        Labels: { 'bb.test': 'sidecar-in-bottle', 'bb.role': 'sidecar' },
        Env: [
          `FORGE_GITEA_API=${server.apiUrl}`,
          'FORGE_OWNER=acme',
          'FORGE_REPO=widgets',
          'FORGE_ISSUE_NUMBER=1',
          'FORGE_PR_NUMBER=',
          `FORGE_TOKEN=${TOKEN}`,
          'BB_SIDECAR_SOCKET=/run/bb/forge.sock',
          'BB_QUEUE_DIR=/var/bb/queue',
          'BB_OPS_LOG=/var/bb/state/ops.jsonl',
          'BB_WORKSPACE=/workspace',
          'BB_BRANCH=bb/implementer-1',
        ],
        HostConfig: {
          NetworkMode: 'host',
          CapDrop: ['ALL'],
          SecurityOpt: ['no-new-privileges'],
          ReadonlyRootfs: true,
          Binds: [
            `${bundles}:/opt/bb:ro`,
            `${join(dir, 'sock')}:/run/bb`,
            `${join(dir, 'queue')}:/var/bb/queue`,
            `${join(dir, 'state')}:/var/bb/state`,
            `${join(dir, 'workspace')}:/workspace`,
          ],
          Tmpfs: { '/tmp': 'rw,size=16m' },
        },
      });
      containers.push(sidecar);
      await sidecar.start();
      const agentScript = `
      set -e
      i=0; while [ ! -S /run/bb/forge.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
      node /opt/bb/bb-forge.mjs read-issue 1 > /tmp/issue.json
      grep -q '"title": "Fix the thing"' /tmp/issue.json
      cd /workspace && echo fixed > fix.txt && git add fix.txt
      git -c user.name=Agent -c user.email=agent@example.test commit -q -m fix
      node /opt/bb/bb-forge.mjs open-pr "Fix the thing" "It is fixed." > /tmp/pr.json
      node /opt/bb/bb-forge.mjs comment 1 "PR is up" > /dev/null
      if node /opt/bb/bb-forge.mjs comment 2 "not mine" 2> /tmp/denied; then exit 9; fi
      grep -q SCOPE_DENIED /tmp/denied
      node /opt/bb/bb-forge.mjs done success "Fixed it" > /dev/null
      env | grep -c FORGE_TOKEN || true
    `;
      const agent = await client.createContainer({
        Image: BASE_IMAGE,
        Cmd: ['sh', '-c', agentScript],
        User: '1000:1000',
        Env: ['BB_SIDECAR_SOCKET=/run/bb/forge.sock', 'HOME=/tmp'],
        Labels: { 'bb.test': 'sidecar-in-bottle', 'bb.role': 'agent' },
        HostConfig: {
          NetworkMode: 'none',
          CapDrop: ['ALL'],
          SecurityOpt: ['no-new-privileges'],
          ReadonlyRootfs: true,
          Tmpfs: { '/tmp': 'rw,size=16m' },
          Binds: [
            `${bundles}:/opt/bb:ro`,
            `${join(dir, 'sock')}:/run/bb`,
            `${join(dir, 'workspace')}:/workspace`,
          ],
        },
      });
      containers.push(agent);
      await agent.start();
      const { StatusCode } = (await agent.wait()) as { StatusCode: number };
      const logs = (await agent.logs({ stdout: true, stderr: true })).toString('utf8');
      expect(StatusCode, logs).toBe(0);
      // The forge saw the PR and the comment, made with the sidecar's token.
      expect(server.issue('acme/widgets', 1).comments.map((c) => c.body)).toEqual(['PR is up']);
      const pr = server.issue('acme/widgets', 3);
      expect(server.issue('acme/widgets', 2).comments).toEqual([]);
      expect(pr.pull?.headRef).toBe('bb/implementer-1');
      expect(pr.author).toBe('bb-claude');
      // The agent container's environment, configuration and logs hold no token.
      const info = await agent.inspect();
      expect(JSON.stringify(info)).not.toContain(TOKEN);
      expect(logs).not.toContain(TOKEN);
      const ops = verifyOpLogFile(join(dir, 'state', 'ops.jsonl'));
      expect(ops.ok).toBe(true);
      // Each write's line is flushed before its request; the push is its own write.
      expect(ops.entries.map((e) => `${e.method}:${e.outcome}`)).toEqual([
        'read_issue:ok',
        'push:started',
        'push:ok',
        'open_pr:started',
        'open_pr:ok',
        'post_comment:started',
        'post_comment:ok',
        'post_comment:rejected',
        'signal_done:ok',
      ]);
      expect(readFileSync(join(dir, 'state', 'ops.jsonl'), 'utf8')).not.toContain(TOKEN);
      await sidecar.stop({ t: 5 });
      const sidecarLogs = (await sidecar.logs({ stdout: true, stderr: true })).toString('utf8');
      expect(sidecarLogs).toMatch(/shutting down/);
      expect(sidecarLogs).not.toContain(TOKEN);
    });
  },
);
