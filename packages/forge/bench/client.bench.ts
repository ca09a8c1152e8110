// GiteaForge.readIssue against the Gitea-compatible test server vs a raw undici GET
// of the same URL (body read and JSON-parsed), in one run. Goal: ratio <= 1.1.
import { benchRounds, benchSize, reportBench } from '@bb/tooling/bench';
import { Pool } from 'undici';
import { closeGiteaPools, GiteaForge } from '../src/index';
import { createGiteaTestServer } from '../src/testing/index';
import { TOKENS, WORLD } from '../test/support/world';

const N = benchSize(2000, 200);
const ROUNDS = benchRounds(7, 2);
const server = await createGiteaTestServer({ world: WORLD });
const forge = new GiteaForge({
  baseUrl: server.apiUrl,
  token: TOKENS.bot,
  owner: 'acme',
  repo: 'widgets',
});
// The same forge on node's own HTTP client (what a bottle's gate uses), reported beside.
const nodeForge = new GiteaForge({
  baseUrl: server.apiUrl,
  token: TOKENS.bot,
  owner: 'acme',
  repo: 'widgets',
  clientOptions: { transport: 'node' },
});
const url = new URL(`${server.apiUrl}/repos/acme/widgets/issues/1`);
const raw = new Pool(url.origin, { connections: 8 });

async function timeIt(fn: () => Promise<unknown>): Promise<number> {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) await fn();
  return Number(process.hrtime.bigint() - t0) / 1e3 / N; // µs per call
}
const ours = () => forge.readIssue(1);
const oursNode = () => nodeForge.readIssue(1);
const baseline = async () => {
  const res = await raw.request({
    method: 'GET',
    path: url.pathname,
    headers: { authorization: `token ${TOKENS.bot}`, accept: 'application/json' },
  });
  return JSON.parse(await res.body.text());
};

await timeIt(ours);
await timeIt(oursNode);
await timeIt(baseline); // warm every path
const o: number[] = [];
const b: number[] = [];
const n: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  if (r % 2 === 0) {
    o.push(await timeIt(ours));
    b.push(await timeIt(baseline));
  } else {
    b.push(await timeIt(baseline));
    o.push(await timeIt(ours));
  }
  n.push(await timeIt(oursNode));
}
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
const ratio = median(o.map((x, i) => x / b[i]!));
reportBench({
  name: 'forge-client',
  metric: 'readIssue µs/call (GiteaForge vs raw undici GET + JSON.parse)',
  ours: median(b) * ratio,
  baseline: median(b),
  goal: 1.1,
  higherIsBetter: false,
  extra: {
    callsPerRound: N,
    rounds: ROUNDS,
    nodeTransportVsBaseline: Math.round(median(n.map((x, i) => x / b[i]!)) * 100) / 100,
    nodeTransport: "the same forge on node's own HTTP client, as a bottle's gate runs it",
  },
});
await raw.close();
await closeGiteaPools();
await server.close();
