// Build + sign + store a run record with a 1,000-operation op log, vs just
// serialising the same record, in one run. Reports the ratio and the absolute time.
// (The secret scan is measured apart: it runs gitleaks, whose cost depends on the diff.)
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OpLog } from '@bb/forge-sidecar';
import { BbDatabase } from '@bb/state';
import { benchSize, reportBench } from '@bb/tooling/bench';
import {
  buildRunRecord,
  loadOrCreateSigningKey,
  ProvenanceStore,
  type SecretScanner,
  signRecord,
} from '../src/index';

const dir = mkdtempSync(join(tmpdir(), 'bb-prov-bench-'));
mkdirSync(join(dir, 'bottle', 'state'), { recursive: true });
const log = new OpLog(join(dir, 'bottle', 'state', 'ops.jsonl'));
for (let i = 1; i <= 1000; i++)
  log.append({ method: 'read_issue', target: `#${i}`, outcome: 'ok', summary: `read issue #${i}` });
log.sync();
const noScan: SecretScanner = {
  scanCommits: async () => ({ tool: 'none', scanned: 'nothing', findings: [] }),
};
const key = loadOrCreateSigningKey(dir);
const store = new ProvenanceStore(BbDatabase.open({ path: join(dir, 'bb.db') }));
const base = {
  stateDir: join(dir, 'bottle'),
  agent: 'a',
  bottles: ['default'],
  forge: null,
  turn: 1,
  startedAt: '2026-11-22T05:00:00.000Z',
  finishedAt: '2026-11-22T05:01:00.000Z',
  exitCode: 0,
  done: null,
  watchdogFired: null,
  scanner: noScan,
  bbVersion: '0.0.0',
  gitCommit: null,
};
const N = benchSize(30, 5);
const ours: number[] = [];
const plain: number[] = [];
const sample = await buildRunRecord({ ...base, slug: 'sample' });
for (let r = 0; r < 5; r++) {
  let t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) {
    const slug = `s-${r}-${i}`;
    const rec = await buildRunRecord({ ...base, slug, prev: store.head(slug) });
    store.append(signRecord(rec, key));
  }
  ours.push(Number(process.hrtime.bigint() - t0) / 1e6 / N);
  t0 = process.hrtime.bigint();
  for (let i = 0; i < N; i++) JSON.stringify(sample);
  plain.push(Number(process.hrtime.bigint() - t0) / 1e6 / N);
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
reportBench({
  name: 'provenance',
  metric: 'ms per record, 1,000-op log: build + sign + store vs JSON.stringify of the same record',
  ours: median(ours),
  baseline: median(plain),
  goal: 0,
  higherIsBetter: false,
  target: 'report (no goal set): ratio and absolute time',
  pass: true,
  extra: {
    msPerRecord: Math.round(median(ours) * 100) / 100,
    recordBytes: JSON.stringify(sample).length,
  },
});
rmSync(dir, { recursive: true, force: true });
