// The bare launcher of the service-launch benchmark (e2e/bench/k8s-service-launch.bench.ts),
// in a process of its own as the service is: one launch first (its client warmed, as the
// service is by its warm-up issue), then N bottles' objects created bare, at most
// CONCURRENCY at once (the workspace is the gate pod's init container's to clone, as
// the service's is). Prints `start <epoch ms>` as the N begin, `done` when all are made.
//
//   bare-launch-bin.ts API_URL NAMESPACE N CONCURRENCY
import { BareLauncher } from './bare-launch';

const [url, ns, n, concurrency] = process.argv.slice(2) as [string, string, string, string];
const total = Number(n);
const launcher = new BareLauncher(url, ns);
await launcher.launch('bare-warm');
let next = 0;
process.stdout.write(`start ${Date.now()}\n`);
await Promise.all(
  Array.from({ length: Number(concurrency) }, async () => {
    while (next < total) {
      const i = next++;
      await launcher.launch(`bare-${i}`);
    }
  }),
);
await launcher.close();
process.stdout.write('done\n');
