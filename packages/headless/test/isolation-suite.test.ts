// The isolation suite on the Docker backend, with every call it makes to the engine
// recorded (none may run a command in a bottle or attach to one).
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import Docker from 'dockerode';
import { describe } from 'vitest';
import { DockerBackend } from '../src/docker-backend';
import { describeIsolationConformance } from '../src/testing';

const docker = await probeDocker();

/** A dockerode whose every request's method and path is written down. */
function recordedDocker(calls: string[]): Docker {
  const d = new Docker();
  const modem = d.modem as unknown as {
    dial: (o: { method: string; path: string }, cb: unknown) => unknown;
  };
  const dial = modem.dial.bind(modem);
  modem.dial = (o, cb) => {
    calls.push(`${o.method} ${o.path}`);
    return dial(o, cb);
  };
  return d;
}

describe.skipIf(!docker.ok)('real Docker', () => {
  const calls: string[] = [];
  describeIsolationConformance('DockerBackend', {
    create: () => new DockerBackend({ docker: recordedDocker(calls) }),
    image: BASE_IMAGE,
    engineCalls: () => calls,
  });
});
