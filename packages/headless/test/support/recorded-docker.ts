import Docker from 'dockerode';

/** A dockerode whose every request's method and path is written to `calls`. */
export function recordedDocker(calls: string[]): Docker {
  const docker = new Docker();
  const modem = docker.modem as unknown as {
    dial: (o: { method: string; path: string }, cb: unknown) => unknown;
  };
  const dial = modem.dial.bind(modem);
  modem.dial = (o, cb) => {
    calls.push(`${o.method} ${o.path}`);
    return dial(o, cb);
  };
  return docker;
}
