// What the Docker backend promises of its own, checked on a real engine.
import { randomUUID } from 'node:crypto';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterEach, describe, expect, it } from 'vitest';
import type { BottleSpec } from '../src/engine/backend';
import { DockerBackend } from '../src/engine/docker-backend';

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

// The isolation every backend must show (network, hardening, limits, no exec) is
// describeIsolationConformance's, run on Docker in isolation-suite.test.ts. What is
// Docker's own is checked here.
describe.skipIf(!docker.ok)('real Docker: bottle isolation', () => {
  it("bounds what a bottle prints on the host's disk too", async () => {
    const r = await runToEnd(agent('echo hello'));
    expect(r.logs).toContain('hello');
    const raw = await new Docker().getContainer(r.id).inspect();
    expect(raw.HostConfig.LogConfig).toEqual({
      Type: 'json-file',
      Config: { 'max-size': '16m', 'max-file': '2' },
    });
  });
});

describe.skipIf(!docker.ok)('real Docker: bad input', () => {
  it('a missing image is NOT_FOUND with the fix, and no container is left', async () => {
    const spec = agent('true', { image: 'bb-no-such-image:never' });
    const err = await backend.create(spec).catch((e) => e);
    expect(err.code).toBe('NOT_FOUND');
    expect(err.message).toMatch(
      /image bb-no-such-image:never is not on this Docker engine: build or pull it/,
    );
    expect(await backend.list({ 'bb.slug': spec.labels['bb.slug']! })).toEqual([]);
    // One of bot-bottle's own images: the script that builds it is named.
    const ours = await backend
      .create(agent('true', { image: 'forklift/kitchen-sink:bb-test-missing' }))
      .catch((e) => e);
    expect(ours.message).toMatch(
      /forklift\/kitchen-sink:bb-test-missing is not on this Docker engine: build it with sh scripts\/build-kitchen-sink-image\.sh/,
    );
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
