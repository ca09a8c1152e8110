// Builds are bounded while they run: a rebuild runs RUN steps the agent wrote, on the
// host, once a busy operator approves a plausible Dockerfile. A step that writes far
// past the bottle's disk quota (and deletes it before the step ends, so no check
// made after the build could see it), one that forks thousands of processes, and one
// that never ends are each stopped while they run: the write fails inside the step,
// the forks fail, the step is killed at the time limit with nothing left running.
import { execFileSync } from 'node:child_process';
import { defaultPolicy } from '@bb/supervise';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyOperator, RedTeam } from './harness';

const docker = await probeDocker();
const root = process.getuid?.() === 0;

/** Processes on this machine whose command line is `argv` (or starts with it). */
function running(argv: string): number {
  const out = execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.trim() === argv || l.startsWith(`${argv} `)).length;
}

describe.skipIf(!docker.ok || !root)('red team: a rebuild is bounded while it runs', () => {
  const rt = new RedTeam();
  beforeAll(async () => {
    await rt.start();
    // A bottle with a small disk: its rebuilds may write no more than that.
    rt.bottle('small', { image: BASE_IMAGE, resources: { disk: '256m' } });
  });
  afterAll(() => rt.stop());

  /** The agent proposes `dockerfile`; the operator approves it; the rebuild's outcome. */
  async function rebuild(
    dockerfile: string,
    env: Record<string, string> = {},
  ): Promise<{ ok: boolean; detail: string; ms: number }> {
    const b64 = Buffer.from(dockerfile).toString('base64');
    let outcome: { ok: boolean; detail: string; ms: number } | undefined;
    const operator = busyOperator(
      () => rt.desk(defaultPolicy(), env),
      async (desk, r) => {
        const t0 = Date.now();
        const o = await desk.approve(r.id, { by: 'alice', via: 'cli' });
        outcome = {
          ok: o.remediation?.ok ?? false,
          detail: o.remediation?.detail ?? '',
          ms: Date.now() - t0,
        };
      },
    );
    await rt.launch(
      [
        [
          { do: 'sh', cmd: `echo ${b64} | base64 -d > /tmp/Dockerfile` },
          {
            do: 'sh',
            cmd: "node /opt/bb/bb-supervise.mjs capability-block --file /tmp/Dockerfile --why 'the tests need a tool the image lacks, installed by this step' --wait 120 > /workspace/answer.json",
            mayFail: true,
          },
          { do: 'exit', code: 0 },
        ],
        [{ do: 'sh', cmd: 'true' }],
      ],
      { bottles: ['small'], partial: true },
    );
    operator.stop();
    await operator.done;
    expect(outcome, 'the operator approved a rebuild').toBeDefined();
    return outcome!;
  }

  it('a step that writes past the disk quota fails as it writes, even when it deletes what it wrote', async () => {
    const out = await rebuild(
      `FROM ${BASE_IMAGE}\nUSER 0\nRUN dd if=/dev/zero of=/fill bs=1M count=1536 && rm -f /fill && echo wrote-and-deleted\nUSER 1000\n`,
    );
    expect(out.ok, out.detail).toBe(false);
    expect(out.detail).toMatch(/No space left on device/);
  }, 240_000);

  it('a step that forks thousands of processes gets only its share', async () => {
    const out = await rebuild(
      `FROM ${BASE_IMAGE}\nUSER 0\nRUN i=0; while [ $i -lt 2000 ]; do sleep 30 & i=$((i+1)); done; set -- /proc/[0-9]*; echo procs=$#; kill -9 -1; [ $# -ge 2000 ]\nUSER 1000\n`,
    );
    // Fewer than asked for could start: the step's check fails, and so does the build.
    expect(out.ok, out.detail).toBe(false);
    // Its shell could not fork past the build's share (busybox's ends the step there); had
    // it got to count its processes (with builtins, no fork), there would be no more.
    expect(out.detail).toMatch(/can't fork|procs=\d+/);
    const procs = /procs=(\d+)/.exec(out.detail)?.[1];
    if (procs) expect(Number(procs)).toBeLessThanOrEqual(1024);
  }, 240_000);

  it('a step that never ends is killed at the time limit, and nothing of it runs on', async () => {
    const out = await rebuild(`FROM ${BASE_IMAGE}\nRUN sleep 6127\n`, { BB_BUILD_TIMEOUT: '8' });
    expect(out.ok).toBe(false);
    expect(out.detail).toMatch(/took longer than 8 s/);
    await new Promise((r) => setTimeout(r, 2000));
    expect(running('sleep 6127')).toBe(0);
  }, 240_000);

  it('every build engine is gone afterwards: no daemon, mount, cgroup or file left', async () => {
    const { existsSync, readdirSync, readFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const builds = join(rt.home, 'builds');
    expect(existsSync(builds) ? readdirSync(builds) : []).toEqual([]);
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toContain(builds);
    expect(readdirSync('/run').filter((f) => f.startsWith('bb-build-'))).toEqual([]);
    for (const tree of ['/sys/fs/cgroup/pids', '/sys/fs/cgroup'])
      if (existsSync(tree))
        expect(readdirSync(tree).filter((f) => f.startsWith('bb-build-'))).toEqual([]);
    expect(running('dockerd --config-file')).toBe(0);
  });
});
