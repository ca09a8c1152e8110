// kill -9 of the orchestrator at the steps of a launch and of a turn. After
// each restart: no event lost, no issue wedged, no orphan container or clone,
// no duplicate comment, and the turn's evidence recorded once.
import { probeDocker } from '@bb/tooling/docker';
import { afterEach, describe, expect, it, onTestFailed } from 'vitest';
import { opener, worker } from './agents';
import { Scenario, until } from './harness';

const docker = await probeDocker();
const CLONE = /^GET \/acme\/widgets\.git\/info\/refs/;

describe.skipIf(!docker.ok)('faults: the orchestrator is killed', () => {
  let s: Scenario | undefined;
  afterEach(async () => {
    await s?.teardown();
    s = undefined;
  });

  it('killed mid-launch (gate up, agent container made, fetch in progress): the restart removes the half-made bottle and launches again', async () => {
    s = await new Scenario('bb-faults-kill-launch-', { worker: worker(0) }).setup();
    const sc = s;
    onTestFailed(() => console.error(sc.logText()));
    await sc.start();
    sc.proxy.fail(CLONE, 'hang', 1);
    const n = sc.issue('Killed while cloning', 'worker');
    await until('the clone to hang', () => (sc.proxy.faulted(CLONE) === 1 ? true : undefined));
    // Its agent's container is up, its program held until the workspace is made.
    const first = await until('the half-made bottle', async () =>
      (await sc.containers()).some((c) => c.role === 'agent' && c.state === 'running')
        ? sc.row(n)?.slug
        : undefined,
    );
    expect(sc.strays().length).toBeGreaterThan(0);
    await sc.stop('SIGKILL');
    // The fetch died with the orchestrator (its transport helper ends with the connection).
    await until(
      'no clone left running',
      () => (sc.strays().length === 0 ? true : undefined),
      10_000,
    );
    sc.proxy.heal();
    await sc.start();
    const row = await until('the issue to launch again and freeze with a PR', () =>
      sc.row(n)?.status === 'frozen' && sc.row(n)?.prNumber ? sc.row(n) : undefined,
    );
    expect(row!.slug).not.toBe(first);
    expect(
      sc
        .logs()
        .some(
          (l) =>
            l['msg'] === 'reconciled with the backend' &&
            (l['neverStarted'] as string[])?.includes(first!),
        ),
    ).toBe(true);
    expect(sc.comments(n).filter((c) => c === 'Starting.')).toHaveLength(1);
    expect(sc.chain(row!.slug)).toHaveLength(1);
    expect(sc.openEvents()).toEqual([]);
    await sc.expectClean([]);
  }, 120_000);

  it('killed mid-turn with a comment waiting behind the turn, and again after the agent exited: the comment resumes the bottle, each turn recorded once', async () => {
    // Its first turn outlasts two orchestrator restarts, even on a loaded machine.
    s = await new Scenario('bb-faults-kill-turn-', { opener: opener(15000) }).setup();
    const sc = s;
    onTestFailed(() => console.error(sc.logText()));
    await sc.start();
    const n = sc.issue('Killed mid-turn', 'opener');
    await sc.started(n, 'the agent to open its PR and comment');
    const pr = sc.gitea.issue('acme/widgets', n + 1).pull ? n + 1 : undefined;
    expect(pr).toBeDefined();
    // A human answers on the PR while the agent still works; then the orchestrator dies.
    sc.gitea.comment('alice', 'acme/widgets', pr!, 'Please also handle empty widgets.');
    await sc.gitea.settle();
    await sc.stop('SIGKILL');
    await sc.start();
    // It runs on: now stop it (SIGSTOP) until the agent has exited, then kill it.
    const slug = sc.row(n)!.slug;
    sc.proc!.kill('SIGSTOP');
    // The premise: the first turn's agent was still at work when this orchestrator stopped.
    expect(sc.chain(slug)).toHaveLength(0);
    await until('the first turn’s agent to exit', async () =>
      (await sc.turnEnded(slug, 1)) ? true : undefined,
    );
    await sc.stop('SIGKILL');
    await sc.start();
    await until('the waiting comment to resume the bottle', () =>
      sc.chain(slug).length === 2 ? true : undefined,
    );
    expect(sc.chain(slug)[0]!.done).toEqual({ status: 'success', summary: 'Opened the PR early.' });
    expect(sc.comments(n).at(-1)).toContain('Please also handle empty widgets.');
    expect(sc.comments(n).filter((c) => c === 'Starting.')).toHaveLength(1);
    await until('frozen again', () => (sc.row(n)?.status === 'frozen' ? true : undefined));
    expect(sc.openEvents()).toEqual([]);
    await sc.expectClean([slug]);
    expect((await sc.containers()).filter((c) => c.state === 'running')).toEqual([]);
  }, 150_000);
});
