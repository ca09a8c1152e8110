import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { describe } from 'vitest';
import { DockerBackend } from '../src/engine/docker-backend';
import { LocalBackend } from '../src/engine/local-backend';
import { describeBackendConformance } from '../src/testing';

const docker = await probeDocker();

describe.skipIf(!docker.ok)('real Docker', () => {
  describeBackendConformance('DockerBackend', {
    create: () => new DockerBackend(),
    image: BASE_IMAGE,
  });
});

describeBackendConformance('LocalBackend', {
  create: () => new LocalBackend({ warn: () => {} }),
  image: 'unused',
});
