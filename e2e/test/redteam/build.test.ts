// Builds are bounded while they run: a rebuild runs RUN steps the agent wrote, on the
// host, once a busy operator approves a plausible Dockerfile. A step that writes far
// past the bottle's disk quota (and deletes it before the step ends, so no check
// made after the build could see it), one that forks thousands of processes, and one
// that never ends are each stopped while they run: the write fails inside the step,
// the forks fail, the step is killed at the time limit with nothing left running.
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo, Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultPolicy } from '@bb/supervise';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeDebianImage } from '../support';
import { busyOperator, RedTeam } from './harness';

const docker = await probeDocker();
const root = process.getuid?.() === 0;
const debian = await probeDebianImage(docker.ok);

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
    policy = defaultPolicy(),
  ): Promise<{ ok: boolean; detail: string; ms: number }> {
    const b64 = Buffer.from(dockerfile).toString('base64');
    let outcome: { ok: boolean; detail: string; ms: number } | undefined;
    const operator = busyOperator(
      () => rt.desk(policy, env),
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

  it.skipIf(!debian.ok)(
    "a step installs a Debian package through the build's proxy from a mirror the operator names, and reaches nothing else",
    async () => {
      const mirror = await debianMirror();
      // Somewhere no step may reach: not in the bottle's allowlist, not a registry of the operator's.
      const hits: string[] = [];
      const elsewhere = createServer((req, res) => {
        hits.push(req.url ?? '');
        res.end('you should not see this');
      });
      await new Promise<void>((r) => elsewhere.listen(0, '127.0.0.1', r));
      const other = (elsewhere.address() as AddressInfo).port;
      writeFileSync(
        join(rt.home, 'config', 'supervise.json'),
        JSON.stringify({
          buildRegistries: [`127.0.0.1:${mirror.port}`],
          baseImages: [debian.image],
        }),
      );
      // A system containerd where dockerd looks for one, as a docker-ce host has: a build
      // engine that took it would run its steps in the host's network.
      const decoy = await systemContainerd();
      try {
        const out = await rebuild(
          [
            `FROM ${debian.image}`,
            'SHELL ["/bin/bash", "-c"]',
            `RUN echo 'deb [trusted=yes] http://127.0.0.1:${mirror.port}/ ./' > /etc/apt/sources.list && apt-get update && apt-get install -y --no-install-recommends bbmarker && bbmarker`,
            // Through the proxy, a host it does not allow is refused (403); without it, nothing answers.
            `RUN exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://127.0.0.1:${other}/secret HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3 | grep -q ' 403 ' && echo proxy-refused-it`,
            `RUN ! (exec 3<>/dev/tcp/127.0.0.1/${other}) 2>/dev/null && echo nothing-direct`,
            // The namespace is shared with the build's engine: no socket of its there takes a
            // connection (abstract Unix sockets belong to a network namespace; its listening ones
            // are files elsewhere). Its one abstract socket is the datagram socket the daemon
            // writes its journal with, never read from.
            "RUN if grep -E '^[0-9a-f]+: [0-9a-f]+ [0-9a-f]+ [0-9a-f]+ 000[15] .* @' /proc/net/unix; then exit 1; fi; echo no-abstract-listeners",
            'USER 1000',
            '',
          ].join('\n'),
          {},
          { ...defaultPolicy(), baseImages: [debian.image], egressCeiling: [] },
        );
        expect(out.ok, out.detail).toBe(true);
        const tag = /rebuilt as (\S+);/.exec(out.detail)![1]!;
        // The package is in the image; the mirror served its index and the package.
        const ran = execFileSync('docker', ['run', '--rm', tag, 'bbmarker'], { encoding: 'utf8' });
        expect(ran.trim()).toBe('bbmarker-installed');
        expect(mirror.hits.some((u) => u.endsWith('Packages') || u.includes('Packages'))).toBe(
          true,
        );
        expect(mirror.hits).toContain('/bbmarker_1.0_all.deb');
        expect(hits).toEqual([]);
      } finally {
        await decoy?.stop();
        writeFileSync(join(rt.home, 'config', 'supervise.json'), '{}');
        mirror.server.close();
        elsewhere.close();
      }
    },
    300_000,
  );

  it('with no registries and no allowlist, a step reaches nothing', async () => {
    const mirror = await debianMirror();
    writeFileSync(
      join(rt.home, 'config', 'supervise.json'),
      JSON.stringify({ buildRegistries: [] }),
    );
    try {
      const out = await rebuild(
        `FROM ${BASE_IMAGE}\nRUN wget -q -T 3 -O- http://127.0.0.1:${mirror.port}/Packages\n`,
      );
      expect(out.ok).toBe(false);
      expect(mirror.hits).toEqual([]);
    } finally {
      writeFileSync(join(rt.home, 'config', 'supervise.json'), '{}');
      mirror.server.close();
    }
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
    // Nor the network namespace of a build's steps, nor its bridge, nor its containerd.
    expect(execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })).not.toMatch(/bb-build-/);
    expect(
      execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
        .split('\n')
        .filter((l) => l.includes(builds)),
    ).toEqual([]);
  });
});

/**
 * A containerd at /run/containerd/containerd.sock, where dockerd looks for a system one,
 * unless one is there already (then it is left alone, and nothing is stopped).
 */
async function systemContainerd(): Promise<{ stop(): Promise<void> } | undefined> {
  const sock = '/run/containerd/containerd.sock';
  if (existsSync(sock)) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'bb-decoy-containerd-'));
  writeFileSync(
    join(dir, 'config.toml'),
    `version = 2\nroot = "${dir}/root"\nstate = "/run/bb-decoy-containerd"\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "${sock}"\n[ttrpc]\n  address = "${sock}.ttrpc"\n`,
  );
  mkdirSync('/run/containerd', { recursive: true });
  const child = spawn('containerd', ['--config', join(dir, 'config.toml')], { stdio: 'ignore' });
  for (let i = 0; i < 100 && !existsSync(sock); i++) await new Promise((r) => setTimeout(r, 50));
  if (!existsSync(sock)) throw new Error('the decoy containerd did not start');
  return {
    stop: async () => {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
      rmSync(sock, { force: true });
      rmSync(`${sock}.ttrpc`, { force: true });
      rmSync('/run/bb-decoy-containerd', { recursive: true, force: true });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A Debian mirror of one package on loopback (a flat repository): `bbmarker`,
 * made here with dpkg-deb, whose program prints `bbmarker-installed`.
 */
async function debianMirror(): Promise<{ server: Server; port: number; hits: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'bb-mirror-'));
  const pkg = join(dir, 'pkg');
  mkdirSync(join(pkg, 'DEBIAN'), { recursive: true });
  mkdirSync(join(pkg, 'usr', 'bin'), { recursive: true });
  writeFileSync(
    join(pkg, 'DEBIAN', 'control'),
    'Package: bbmarker\nVersion: 1.0\nArchitecture: all\nMaintainer: bot-bottle tests <t@example.test>\nDescription: a marker for the build test\n',
  );
  writeFileSync(join(pkg, 'usr', 'bin', 'bbmarker'), '#!/bin/sh\necho bbmarker-installed\n', {
    mode: 0o755,
  });
  const deb = join(dir, 'bbmarker_1.0_all.deb');
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', pkg, deb], { stdio: 'ignore' });
  const bytes = readFileSync(deb);
  const packages = `Package: bbmarker\nVersion: 1.0\nArchitecture: all\nMaintainer: bot-bottle tests <t@example.test>\nFilename: ./bbmarker_1.0_all.deb\nSize: ${bytes.length}\nSHA256: ${createHash('sha256').update(bytes).digest('hex')}\nDescription: a marker for the build test\n\n`;
  const files: Record<string, Buffer> = {
    '/Packages': Buffer.from(packages),
    '/bbmarker_1.0_all.deb': bytes,
  };
  rmSync(dir, { recursive: true, force: true });
  const hits: string[] = [];
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    hits.push(path);
    const body = files[path];
    res.writeHead(body ? 200 : 404).end(body ?? '');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port, hits };
}
