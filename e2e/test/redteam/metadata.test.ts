// I10, host actions follow host-owned records only: an image can carry labels, an
// entrypoint and a stop signal, and the engine merges them into every container made
// from it. A hostile agent proposes a one-line Dockerfile change that names another
// container as its bottle's network holder; an image from an allowed base carries the
// same labels (and a bb.managed-by claim, an entrypoint, a stop signal of its own). The
// host stops, freezes and destroys those bottles: a container that is not theirs, on
// the same engine, must still be running afterwards, and the bottle's command runs as
// the host wrote it.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { destroy, HOME_LABEL, homeLabel } from '@bb/headless';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { busyOperator, RedTeam } from './harness';

const docker = await probeDocker();

describe.skipIf(!docker.ok)("red team: an image's metadata steers no host action (I10)", () => {
  const rt = new RedTeam();
  const victim = `bb-rt-victim-${process.pid}`;
  const labelled = `bb-rt-labelled:${process.pid}`;
  const running = async () => (await rt.backend.inspect(victim))?.state;

  beforeAll(async () => {
    await rt.start({ 'README.md': '# widgets\n' });
    // Another workload on the same engine (a database, another bottle's holder).
    const made = spawnSync('docker', [
      'run',
      '-d',
      '--name',
      victim,
      '--network',
      'none',
      '--label',
      `${HOME_LABEL}=${homeLabel(rt.env)}`,
      BASE_IMAGE,
      'sleep',
      '900',
    ]);
    expect(made.status, made.stderr.toString()).toBe(0);
    // An image the operator allows as a base, whose metadata names the victim.
    const ctx = mkdtempSync(join(tmpdir(), 'bb-rt-labelled-'));
    writeFileSync(
      join(ctx, 'Dockerfile'),
      [
        `FROM ${BASE_IMAGE}`,
        `LABEL bb.netns=${victim} bb.managed-by=orchestrator bb.role=netns`,
        'ENTRYPOINT ["/bin/sh", "-c", "echo hijacked > /workspace/hijacked.txt; exec sleep 3600"]',
        'STOPSIGNAL SIGUSR2',
        '',
      ].join('\n'),
    );
    const built = spawnSync('docker', ['build', '-q', '-t', labelled, ctx], {
      env: { ...process.env, DOCKER_BUILDKIT: '0' },
    });
    rmSync(ctx, { recursive: true, force: true });
    expect(built.status, built.stderr.toString()).toBe(0);
    rt.bottle('labelled', { image: labelled });
  }, 120_000);
  afterAll(async () => {
    spawnSync('docker', ['rm', '-f', victim]);
    spawnSync('docker', ['rmi', '-f', labelled]);
    await rt.stop();
  });

  it('a bottle made from an image that claims another container is frozen and destroyed, and that container lives', async () => {
    expect(await running()).toBe('running');
    const run = await rt.launch([[{ do: 'sh', cmd: 'echo ran > /workspace/ran.txt' }]], {
      bottles: ['labelled'],
    });
    // The host's command ran, not the image's entrypoint.
    expect(await rt.readWorkspace(run, 'ran.txt')).toBe('ran\n');
    expect(await rt.readWorkspace(run, 'hijacked.txt')).toBeUndefined();
    // Frozen at the turn's end: the victim is untouched.
    expect(await running()).toBe('running');
    // An image the host did not build (an operator's, another agent's) that carries this
    // bottle's labels is not the bottle's to remove.
    const ctx = mkdtempSync(join(tmpdir(), 'bb-rt-claim-'));
    writeFileSync(
      join(ctx, 'Dockerfile'),
      `FROM ${BASE_IMAGE}\nLABEL bb.slug=${run.slug} ${HOME_LABEL}=${homeLabel(rt.env)}\n`,
    );
    const claim = `bb-rt-claim:${process.pid}`;
    const built = spawnSync('docker', ['build', '-q', '-t', claim, ctx], {
      env: { ...process.env, DOCKER_BUILDKIT: '0' },
    });
    rmSync(ctx, { recursive: true, force: true });
    expect(built.status, built.stderr.toString()).toBe(0);
    await destroy(run.slug, { backend: rt.backend, env: rt.env });
    expect(await running()).toBe('running');
    expect(spawnSync('docker', ['image', 'inspect', claim]).status).toBe(0);
    spawnSync('docker', ['rmi', '-f', claim]);
  }, 180_000);

  it('an approved Dockerfile cannot give the bottle a label that names another container', async () => {
    const dockerfile = `FROM ${BASE_IMAGE}\nLABEL bb.netns=${victim}\n`;
    const b64 = Buffer.from(dockerfile).toString('base64');
    // The busy operator approves whatever arrives, for the bottle.
    let decided: unknown;
    const operator = busyOperator(
      () => rt.desk(),
      async (desk, r) => {
        decided = await desk
          .approve(r.id, { by: 'alice', via: 'cli', scope: 'bottle' })
          .catch((e) => e);
      },
    );
    const run = await rt.launch(
      [
        [
          { do: 'sh', cmd: `echo ${b64} | base64 -d > /tmp/Dockerfile` },
          {
            do: 'sh',
            cmd: "node /opt/bb/bb-supervise.mjs capability-block --file /tmp/Dockerfile --why 'the build needs the image metadata for its tooling' --wait 20 > /workspace/answer.txt 2>&1; echo $? >> /workspace/answer.txt",
          },
          { do: 'exit', code: 0 },
        ],
        [{ do: 'sh', cmd: 'true' }],
      ],
      { partial: true },
    );
    operator.stop();
    await operator.done;
    // The attack ran: the agent asked, and heard why not.
    const answer = (await rt.readWorkspace(run, 'answer.txt'))!;
    expect(answer).toMatch(/LABEL may not set bot-bottle's own labels/);
    expect(decided).toBeUndefined();
    // Whatever turn comes next and however the bottle ends, the victim lives.
    await rt.resume(run, 'Go on.').catch(() => undefined);
    await destroy(run.slug, { backend: rt.backend, env: rt.env });
    expect(await running()).toBe('running');
  }, 240_000);
});
