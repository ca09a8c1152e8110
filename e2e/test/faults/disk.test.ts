// BB_HOME fills up while an agent works (BB_HOME is a small tmpfs here). The
// turn fails, but its bottle, workspace and op log stay; once there is room the
// turn is recorded and the bottle frozen. A delivery that cannot be stored
// meanwhile is refused (503, never 202) and the sweep finds it later.
import { execFileSync } from 'node:child_process';
import { closeSync, cpSync, existsSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { makeHome } from '../support';
import { worker } from './agents';
import { Scenario, until } from './harness';

const docker = await probeDocker();

/** A BB_HOME on a tmpfs of `bytes`, with the agents' manifests. */
function tmpfsHome(agents: Record<string, unknown>, bytes: number): string {
  const mount = mkdtempSync(join(tmpdir(), 'bb-faults-tmpfs-'));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${bytes},mode=0700`, 'tmpfs', mount]);
  const made = makeHome('bb-faults-disk-', agents);
  cpSync(join(made, 'config'), join(mount, 'config'), { recursive: true });
  rmSync(made, { recursive: true, force: true });
  return mount;
}

/** A Scenario whose BB_HOME is a small tmpfs. */
class SmallHome extends Scenario {
  constructor(agents: Record<string, unknown>, bytes: number) {
    super('bb-faults-disk-', agents, { home: tmpfsHome(agents, bytes) });
  }
  override async teardown(): Promise<void> {
    await super.teardown().catch(() => {});
    try {
      execFileSync('umount', ['-l', this.home]);
    } catch {
      // not mounted
    }
    rmSync(this.home, { recursive: true, force: true });
  }
}

/** Fill the filesystem of `dir` until a write fails; returns the filler's path. */
function fill(dir: string): string {
  const file = join(dir, 'filler');
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(1024 * 1024, 1);
  try {
    for (;;) writeSync(fd, chunk);
  } catch {
    // full
  } finally {
    closeSync(fd);
  }
  return file;
}

describe.skipIf(!docker.ok)('faults: BB_HOME is full', () => {
  let s: SmallHome;
  beforeAll(async () => {
    s = await new SmallHome({ worker: worker(3000) }, 256 * 1024 * 1024).setup();
    await s.start({ BB_BOTTLE_DISK: 'off', BB_SWEEP_INTERVAL: '2s' });
  });
  afterAll(async () => s?.teardown());

  it('a turn that fails on a full disk keeps its bottle and op log, and is recorded once there is room; nothing accepted is lost', async () => {
    onTestFailed(() => console.error(s.logText()));
    const n = s.issue('Disk fills up', 'worker');
    await s.started(n);
    const slug = s.row(n)!.slug;
    const filler = fill(s.home);
    // A change made while the disk is full is not acknowledged.
    const later = s.issue('Filed while full', 'worker');
    await s.gitea.settle();
    const delivery = s.gitea.deliveries.filter((d) => d.eventType === 'issues').at(-1)!;
    expect(delivery.status).toBe(503);
    // The agent's turn fails for want of room; its evidence stays.
    await until('the agent to exit', async () =>
      (await s.containers()).some(
        (c) => c.slug === slug && c.role === 'agent' && c.state === 'exited',
      )
        ? true
        : !(await s.containers()).some((c) => c.slug === slug && c.role === 'agent') || undefined,
    );
    await new Promise((r) => setTimeout(r, 3000));
    expect(existsSync(join(s.home, 'bottles', slug, 'state', 'ops.jsonl'))).toBe(true);
    rmSync(filler);
    await until('the turn recorded and the bottle frozen', () =>
      s.row(n)?.status === 'frozen' && s.chain(slug).length === 1 ? true : undefined,
    );
    const [record] = s.chain(slug);
    expect(record!.exitCode).not.toBe(0);
    expect(record!.opLog.entries.length).toBeGreaterThan(0);
    expect(existsSync(join(s.home, 'bottles', slug, 'state', 'ops.jsonl'))).toBe(true);
    // The refused delivery's issue is found by the sweep and launched.
    await s.started(later, 'the issue filed while full to run');
    expect(s.comments(n).filter((c) => c === 'Starting.')).toHaveLength(1);
  }, 150_000);
});
