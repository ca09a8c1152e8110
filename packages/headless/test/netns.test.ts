// Empty network namespaces made ahead of time: an agent joining one has no network
// (loopback only) exactly as with its own, each holder is handed out once, and
// nothing is run in or attached to any container for it.
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { afterAll, describe, expect, it } from 'vitest';
import { DockerBackend } from '../src/engine/docker-backend';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('DockerBackend.takeNetns', () => {
  const backend = new DockerBackend({ netnsPool: 2, netnsImage: BASE_IMAGE });
  const made: string[] = [];
  afterAll(async () => {
    for (const id of made) await backend.destroy(id);
  });

  async function take(): Promise<string> {
    for (let i = 0; i < 200; i++) {
      const id = await backend.takeNetns();
      if (id) return id;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error('no holder became ready');
  }

  it('hands out hardened holders with no network, each once; an agent joining one has loopback only', async () => {
    const a = await take();
    const b = await take();
    made.push(a, b);
    expect(a).not.toBe(b);
    const raw = await new Docker().getContainer(a).inspect();
    expect(raw.HostConfig.NetworkMode).toBe('none');
    expect(raw.HostConfig.CapDrop).toEqual(['ALL']);
    expect(raw.HostConfig.ReadonlyRootfs).toBe(true);
    expect(raw.Config.User).toBe('65534:65534');
    const id = await backend.create({
      name: `bb-netns-test-${process.pid}`,
      image: BASE_IMAGE,
      cmd: ['sh', '-c', 'cat /proc/net/dev; cat /proc/net/route'],
      labels: { 'bb.slug': 'netns-test', 'bb.role': 'agent' },
      network: 'none',
      netns: a,
      user: '1000:1000',
      readOnlyRootfs: true,
    });
    made.push(id);
    await backend.start(id);
    expect((await backend.wait(id)).exitCode).toBe(0);
    const out = await backend.logs(id);
    // Only the loopback interface, and no route anywhere.
    const ifaces = out
      .split('\n')
      .filter((l) => l.includes(':') && !l.includes('|'))
      .map((l) => l.split(':')[0]!.trim());
    expect(ifaces).toEqual(['lo']);
    expect(out).not.toMatch(/^\w+\t[0-9A-F]{8}/m);
    // Reported as no network: the backend made the holder with none.
    expect((await backend.inspect(id))!.isolation.network).toBe('none');
    expect((await new Docker().getContainer(id).inspect()).HostConfig.NetworkMode).toBe(
      `container:${a}`,
    );
  });
});
