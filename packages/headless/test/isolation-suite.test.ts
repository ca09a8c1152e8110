// The isolation suite on the Docker backend, with every call it makes to the engine
// recorded (none may run a command in a bottle or attach to one).
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { describe } from 'vitest';
import { DockerBackend } from '../src/engine/docker-backend';
import { describeIsolationConformance } from '../src/testing';
import { recordedDocker } from './support/recorded-docker';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('real Docker', () => {
  const calls: string[] = [];
  describeIsolationConformance('DockerBackend', {
    create: () => new DockerBackend({ docker: recordedDocker(calls) }),
    image: BASE_IMAGE,
    engineCalls: () => calls,
  });
});
