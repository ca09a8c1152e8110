// The load client in a process of its own (the webhook benches): the servers measured do
// not share their event loop with it. Ports are comma-separated (round robin to each);
// with a fourth argument, issue comments over that many issues. Prints the run as JSON.
import { deliveries, issueDeliveries, load } from './load';

const [ports, count, first, issues] = process.argv.slice(2);
const n = Number(count);
const firstId = Number(first);
const list = issues ? issueDeliveries(n, firstId, Number(issues)) : deliveries(n, firstId);
const run = await load(ports!.split(',').map(Number), list, true, 10, !!issues);
process.stdout.write(
  JSON.stringify({ lat: run.lat, seconds: run.seconds, statuses: [...run.statuses] }),
);
