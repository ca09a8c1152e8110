// The bare launcher of the service-launch benchmark (e2e/bench/k8s-service-launch.bench.ts),
// in a process of its own as the service is: N bottles' objects created bare, at most
// CONCURRENCY at once, each with its workspace cloned (`git clone --shared` of a local
// mirror) once its gate runs, before its agent's pod. Prints `start <epoch ms>` as it
// begins, `done` when every launch is made.
//
//   bare-launch-bin.ts API_URL NAMESPACE N CONCURRENCY MIRROR WORKDIR
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BareLauncher } from './bare-launch';

const [url, ns, n, concurrency, mirror, workdir] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
  string,
];
const run = promisify(execFile);
const total = Number(n);
const launcher = new BareLauncher(url, ns);
let next = 0;
process.stdout.write(`start ${Date.now()}\n`);
await Promise.all(
  Array.from({ length: Number(concurrency) }, async () => {
    while (next < total) {
      const i = next++;
      await launcher.launch(`bare-${i}`, async () => {
        await run('git', ['clone', '-q', '--shared', mirror, join(workdir, `ws-${i}`)]);
      });
    }
  }),
);
await launcher.close();
process.stdout.write('done\n');
