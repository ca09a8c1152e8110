// What the Docker backend promises about isolation, checked on a real engine.
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterEach, describe, expect, it } from 'vitest';
import type { BottleSpec } from '../src/backend';
import { DockerBackend } from '../src/docker-backend';

const docker = await probeDocker();
const backend = new DockerBackend();
const made: string[] = [];
afterEach(async () => {
  for (const id of made.splice(0)) await backend.destroy(id);
});

function agent(script: string, over: Partial<BottleSpec> = {}): BottleSpec {
  const slug = `iso-${randomUUID().slice(0, 8)}`;
  return {
    name: `bb-${slug}-agent`,
    image: BASE_IMAGE,
    cmd: ['sh', '-c', script],
    user: '1000:1000',
    labels: { 'bb.slug': slug, 'bb.role': 'agent' },
    network: 'none',
    readOnlyRootfs: true,
    tmpfs: { '/tmp': 'rw,size=16m' },
    resources: { memoryBytes: 64 * 1024 * 1024, pidsLimit: 64 },
    ...over,
  };
}
async function runToEnd(spec: BottleSpec) {
  const id = await backend.create(spec);
  made.push(id);
  await backend.start(id);
  const res = await backend.wait(id);
  return { id, ...res, logs: await backend.logs(id), info: (await backend.inspect(id))! };
}

describe.skipIf(!docker.ok)('real Docker: bottle isolation', () => {
  it('applies and reports the hardening: no network, no capabilities, no new privileges, read-only root, uid 1000, limits', async () => {
    const r = await runToEnd(
      agent('id -u; touch /etc/x 2>&1 || echo readonly; touch /tmp/ok && echo tmp-ok'),
    );
    expect(r.info.isolation).toEqual({
      network: 'none',
      capDrop: ['ALL'],
      noNewPrivileges: true,
      readOnlyRootfs: true,
      user: '1000:1000',
      pidsLimit: 64,
      memoryBytes: 64 * 1024 * 1024,
    });
    expect(r.logs).toMatch(/^1000$/m);
    expect(r.logs).toContain('readonly');
    expect(r.logs).toContain('tmp-ok');
    // What it prints is bounded on the host's disk too.
    const raw = await new Docker().getContainer(r.id).inspect();
    expect(raw.HostConfig.LogConfig).toEqual({
      Type: 'json-file',
      Config: { 'max-size': '16m', 'max-file': '2' },
    });
  });

  it('cannot open a TCP connection anywhere, not even to the host', async () => {
    const r = await runToEnd(
      agent(
        `node -e "const s=require('net').connect({host:'127.0.0.1',port:22,timeout:2000});s.on('connect',()=>process.exit(0));s.on('error',e=>{console.log(e.code);process.exit(7)});s.on('timeout',()=>process.exit(8))"`,
      ),
    );
    expect(r.exitCode).toBe(7);
    expect(r.logs).toMatch(/ECONNREFUSED|ENETUNREACH/);
  });

  it('contains a fork bomb within its pids limit; the host keeps working', async () => {
    const id = await backend.create(
      agent('bomb() { bomb | bomb & }; bomb; sleep 3; echo survived', {
        resources: { pidsLimit: 32, memoryBytes: 64 * 1024 * 1024 },
      }),
    );
    made.push(id);
    await backend.start(id);
    await new Promise((r) => setTimeout(r, 2500));
    const pids = await new Docker().getContainer(id).stats({ stream: false });
    expect(
      (pids as { pids_stats?: { current?: number } }).pids_stats?.current ?? 0,
    ).toBeLessThanOrEqual(32);
    // The host can still start processes.
    expect(spawnSync('true').status).toBe(0);
    await backend.stop(id, 1000);
    expect((await backend.inspect(id))?.state).toBe('exited');
  });

  it('kills a memory hog at its limit and reports it as out of memory', async () => {
    const r = await runToEnd(
      agent(`node -e "const a=[];for(;;)a.push(Buffer.alloc(8*1024*1024,1))"`),
    );
    expect(r.oomKilled).toBe(true);
    expect(r.exitCode).toBe(137);
  });
});

describe.skipIf(!docker.ok)('real Docker: bad input', () => {
  it('a missing image is NOT_FOUND with the fix, and no container is left', async () => {
    const spec = agent('true', { image: 'bb-no-such-image:never' });
    const err = await backend.create(spec).catch((e) => e);
    expect(err.code).toBe('NOT_FOUND');
    expect(err.message).toMatch(
      /image bb-no-such-image:never is not on this Docker engine: build it/,
    );
    expect(await backend.list({ 'bb.slug': spec.labels['bb.slug']! })).toEqual([]);
  });

  it('a Docker engine that does not answer is BACKEND_UNAVAILABLE, naming DOCKER_HOST', async () => {
    const down = new DockerBackend({
      docker: new Docker({ socketPath: '/nonexistent/docker.sock' }),
    });
    const err = await down.ensureImage(BASE_IMAGE).catch((e) => e);
    expect(err.code).toBe('BACKEND_UNAVAILABLE');
    expect(err.message).toMatch(/does not answer.*set DOCKER_HOST/);
  });

  it('refuses an invalid container name', async () => {
    const err = await backend.create(agent('true', { name: '../evil' })).catch((e) => e);
    expect(err.code).toBe('INVALID_INPUT');
  });
});
