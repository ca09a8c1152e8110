// The load client in a process of its own (webhook-postgres.bench.ts): the servers
// measured do not share their event loop with it. Prints the run as JSON.
import { deliveries, load } from './load';

const [port, n, firstId] = process.argv.slice(2).map(Number);
const run = await load(port!, deliveries(n!, firstId!));
process.stdout.write(
  JSON.stringify({ lat: run.lat, seconds: run.seconds, statuses: [...run.statuses] }),
);
