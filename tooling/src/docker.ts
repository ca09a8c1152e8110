/**
 * @module
 * Test helper: find out whether a Docker engine answers. When `BB_REQUIRE_DOCKER=1`
 * (as in CI) a missing engine is an error, so real-Docker tests fail instead of
 * skipping silently.
 */
import Docker from 'dockerode';

export interface DockerProbe {
  ok: boolean;
  reason: string;
}

let cached: Promise<DockerProbe> | undefined;

export function probeDocker(): Promise<DockerProbe> {
  cached ??= (async () => {
    const docker = new Docker();
    try {
      await docker.ping();
      return { ok: true, reason: 'docker engine answered' };
    } catch (err) {
      const host = process.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock';
      const reason = `no Docker engine at ${host} (${(err as Error).message}); run scripts/ensure-docker.sh`;
      if (process.env['BB_REQUIRE_DOCKER'] === '1') {
        throw new Error(`BB_REQUIRE_DOCKER=1 but ${reason}`);
      }
      console.warn(`[bb] skipping real-Docker tests: ${reason}`);
      return { ok: false, reason };
    }
  })();
  return cached;
}

/** The tag scripts/build-base-image.sh gives the offline bottle base image. */
export const BASE_IMAGE = process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest';
