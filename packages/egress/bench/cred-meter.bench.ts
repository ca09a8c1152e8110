// What metering costs: the credential proxy reads every model answer's usage as it
// passes (packages/egress/src/usage-meter.ts). Against, in the same run, the same
// proxy with the meter off (the floor: everything else it does, nothing less), each
// serving the same streamed Anthropic answer from a loopback upstream: 1,500 text
// deltas and the usage events, about 250 KiB, at loopback speed. Interleaved rounds,
// median per answer. Goal: <= 1.5x the floor. (Served this fast, the proxy's own work
// per answer is small, so the meter's ~0.5 ms shows; a real model takes tens of
// seconds to stream an answer this long, beside which the meter is nothing:
// `addedMs` says what it adds.)
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchRounds, reportBench } from '@bb/tooling/bench';
import { createCredentialProxy } from '../src/index';

const quick = process.argv.includes('--quick');
const events = [
  `event: message_start\ndata: ${JSON.stringify({ type: 'message_start', message: { model: 'claude-sonnet-4-5', usage: { input_tokens: 900, cache_read_input_tokens: 40_000, output_tokens: 1 } } })}\n\n`,
  ...Array.from(
    { length: 1500 },
    (_, i) =>
      `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: `token ${i} of a long answer, with some words in it. ` } })}\n\n`,
  ),
  `event: message_delta\ndata: ${JSON.stringify({ type: 'message_delta', usage: { output_tokens: 1500 } })}\n\n`,
  'event: message_stop\ndata: {"type":"message_stop"}\n\n',
];
const answer = Buffer.from(events.join(''));
const upstream = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    // In pieces, as a model streams it.
    for (let i = 0; i < answer.length; i += 4096) res.write(answer.subarray(i, i + 4096));
    res.end();
  });
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const port = (upstream.address() as AddressInfo).port;
const dir = mkdtempSync(join(tmpdir(), 'bb-meter-bench-'));

async function proxyOn(meter: boolean) {
  let logged = 0;
  const proxy = createCredentialProxy({
    routes: [
      {
        prefix: '/anthropic',
        upstream: new URL(`http://127.0.0.1:${port}`),
        headers: { 'x-api-key': 'sk-bench-key-0000000000' },
      },
    ],
    log: (e) => {
      if (meter && !e.usage) throw new Error('the meter read no usage');
      logged++;
    },
    meter,
  });
  const socketPath = join(dir, `${meter ? 'on' : 'off'}.sock`);
  await new Promise<void>((r) => proxy.server.listen(socketPath, r));
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const req = request(
        {
          socketPath,
          path: '/anthropic/v1/messages',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        },
        (res) => {
          res.resume();
          res.on('end', resolve);
        },
      );
      req.on('error', reject);
      req.end('{"model":"claude-sonnet-4-5","stream":true,"messages":[]}');
    });
  return { proxy, one, logged: () => logged };
}

const on = await proxyOn(true);
const off = await proxyOn(false);
const rounds = quick ? 5 : 15;
const perRound = quick ? 20 : 60;
const times = { on: [] as number[], off: [] as number[] };
const time = async (p: typeof on) => {
  const t = process.hrtime.bigint();
  for (let i = 0; i < perRound; i++) await p.one();
  return Number(process.hrtime.bigint() - t) / 1e6 / perRound;
};
for (let i = 0; i < benchRounds(20, 3); i++) {
  await on.one();
  await off.one();
}
for (let r = 0; r < rounds; r++) {
  // Interleaved, each side first in turn: neither gets the warmer machine.
  if (r % 2 === 0) {
    times.on.push(await time(on));
    times.off.push(await time(off));
  } else {
    times.off.push(await time(off));
    times.on.push(await time(on));
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
await on.proxy.close();
await off.proxy.close();
upstream.close();
rmSync(dir, { recursive: true, force: true });
reportBench({
  name: 'cred-proxy-metering',
  metric: 'ms per streamed 250 KiB model answer through the credential proxy (median)',
  ours: median(times.on),
  baseline: median(times.off),
  goal: 1.5,
  higherIsBetter: false,
  extra: {
    answers: on.logged(),
    answerBytes: answer.length,
    addedMs: Math.round((median(times.on) - median(times.off)) * 1000) / 1000,
  },
});
