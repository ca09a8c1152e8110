// The turn monitor tells a gate (the forge sidecar's) lost under a working agent
// from the freeze that follows an agent's ordinary exit (which stops the gate too).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type BottleInfo,
  type BottleMeta,
  type BottleRunner,
  hostBottleStorage,
  type TurnOutcome,
} from '@bb/headless';
import { afterEach, describe, expect, it } from 'vitest';
import { TurnMonitor, type TurnReport } from '../src/turn-monitor';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function runnerWith(containers: () => BottleInfo[]): BottleRunner {
  const dir = mkdtempSync(join(tmpdir(), 'bb-monitor-'));
  dirs.push(dir);
  const never = new Promise<TurnOutcome>(() => {});
  return {
    backendName: 'stub',
    startLaunch: async () => {},
    startResume: async () => {},
    finishTurn: () => never,
    stopAgent: async () => {},
    destroy: async () => {},
    containers: async () => containers(),
    ours: async () => [],
    // The host's storage of an empty BB_HOME (no gate socket listens), for a bottle with a forge.
    storage: {
      ...hostBottleStorage({ BB_HOME: dir }),
      meta: async () => ({ forge: { owner: 'acme' } }) as unknown as BottleMeta,
    },
    memoryOf: () => 0,
  };
}

const info = (role: string, state: BottleInfo['state']): BottleInfo =>
  ({ id: role, name: role, state, labels: { 'bb.role': role } }) as unknown as BottleInfo;

async function reportsWithin(runner: BottleRunner, ms: number): Promise<TurnReport[]> {
  const reports: TurnReport[] = [];
  const m = new TurnMonitor({
    runner,
    slug: 's',
    report: (r) => reports.push(r),
    pollMs: 10_000,
    checkMs: 20,
  }).start();
  await new Promise((r) => setTimeout(r, ms));
  m.close();
  return reports;
}

describe('TurnMonitor', () => {
  it('reports a sidecar that exited while the agent works', async () => {
    const reports = await reportsWithin(
      runnerWith(() => [info('agent', 'running'), info('gate', 'exited')]),
      150,
    );
    expect(reports.filter((r) => r.kind === 'gate_lost')).toHaveLength(1);
  });

  it('reports a removed sidecar, and a running one whose socket is gone', async () => {
    expect(
      (
        await reportsWithin(
          runnerWith(() => [info('agent', 'running')]),
          150,
        )
      ).map((r) => r.kind),
    ).toContain('gate_lost');
    expect(
      (
        await reportsWithin(
          runnerWith(() => [info('agent', 'running'), info('gate', 'running')]),
          150,
        )
      ).map((r) => r.kind),
    ).toContain('gate_lost');
  });

  it('says nothing of the sidecar once the agent exited (its turn is ending)', async () => {
    for (const cs of [
      [info('agent', 'exited'), info('gate', 'exited')],
      [info('agent', 'exited')],
      [],
    ]) {
      const reports = await reportsWithin(
        runnerWith(() => cs),
        150,
      );
      expect(reports.filter((r) => r.kind === 'gate_lost')).toEqual([]);
    }
  });
});
