// The orchestrator and the supervise plane: a bottle waiting for the operator is
// not silent; a turn's requests go into its record; a rebuilt image's resume
// comes at once; a destroyed bottle's pending requests are cancelled.
import { readMeta, writeMeta } from '@bb/headless';
import { describe, expect, it } from 'vitest';
import type { SupervisePlane } from '../src/index';
import { setup, until } from './orchestrator-setup';

function plane() {
  const waiting = new Set<string>();
  const cancelled: string[] = [];
  const p: SupervisePlane = {
    awaitingOperator: (slug) => waiting.has(slug),
    auditTurn: (slug) =>
      waiting.has(slug)
        ? []
        : [
            {
              id: 'sr_aaaaaaaaaaaaaaaaaaaa',
              kind: 'allowlist',
              tool: 'pipelock-block',
              createdAt: '2026-06-01T00:00:00.000Z',
              justification: 'pypi for the tests',
              candidateHash: 'a'.repeat(64),
              status: 'approved',
              decision: {
                by: 'alice',
                at: '2026-06-01T00:00:05.000Z',
                scope: 'turn',
                finalHash: 'a'.repeat(64),
                reason: null,
                override: false,
              },
              remediation: { ok: true, detail: 'reloaded', at: '2026-06-01T00:00:05.100Z' },
            },
          ],
    cancelAll: (slug) => cancelled.push(slug),
  };
  return { p, waiting, cancelled };
}

/** The resumes a rebuild asks for, as the runner hands them over: each taken once. */
function rebuiltResumes(runner: { takeResumeRequest?: unknown }) {
  const asked = new Map<string, { prompt: string; requestId: string }>();
  runner.takeResumeRequest = (slug: string) => {
    const a = asked.get(slug);
    asked.delete(slug);
    return a;
  };
  return asked;
}

describe('orchestrator: the supervise plane', () => {
  it("tells a new session's agent about the supervise tools, unless bottles have no supervise sidecar", async () => {
    const on = setup({});
    await on.orch.accept(on.ev.targeted(on.issue()));
    await until('launched', () => on.runner.launches.length === 1);
    const prompt = on.runner.launches[0]!.prompt;
    for (const tool of ['capability-block', 'pipelock-block', 'cred-proxy-block'])
      expect(prompt).toContain(tool);
    expect(prompt).toMatch(/command not found/);
    expect(prompt).toContain('$BB_SUPERVISE');
    const off = setup({});
    off.options.env['BB_SUPERVISE'] = 'off';
    await off.orch.accept(off.ev.targeted(off.issue()));
    await until('launched', () => off.runner.launches.length === 1);
    expect(off.runner.launches[0]!.prompt).not.toContain('capability-block');
    expect(off.runner.launches[0]!.prompt).toContain('signal_done');
    // A runner whose bottles have no supervise plane (Kubernetes, for now): never told of it.
    const none = setup({});
    Object.assign(none.runner, { supervise: false });
    await none.orch.accept(none.ev.targeted(none.issue()));
    await until('launched', () => none.runner.launches.length === 1);
    expect(none.runner.launches[0]!.prompt).not.toContain('capability-block');
    expect(none.runner.launches[0]!.prompt).not.toContain('$BB_SUPERVISE');
  });

  it('does not fire the watchdog while a request waits for the operator, and starts the clock again after', async () => {
    const s = plane();
    const t = setup({ watchdogTimeoutMs: 200, supervise: s.p });
    const { n, slug } = await t.launched();
    s.waiting.add(slug);
    await new Promise((r) => setTimeout(r, 300));
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(slug)).toBe(true);
    // Decided: silence counts again from now, not from the last check-in.
    s.waiting.delete(slug);
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(slug)).toBe(true);
    await t.silenceFires(n, slug);
  });

  it('pauses the watchdog for the operator at most superviseMaxPauseMs in a turn', async () => {
    const s = plane();
    const t = setup({ watchdogTimeoutMs: 200, supervise: s.p, superviseMaxPauseMs: 300 });
    const { n, slug } = await t.launched();
    // A request that never gets an answer (or one after another).
    s.waiting.add(slug);
    await t.orch.checkWatchdog();
    await new Promise((r) => setTimeout(r, 250));
    await t.orch.checkWatchdog();
    expect(t.runner.isRunning(slug)).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    await t.orch.checkWatchdog();
    await t.silenceFires(n, slug, 'silence fired despite the wait');
  });

  it("puts the turn's requests and decisions into its record", async () => {
    const s = plane();
    const t = setup({ supervise: s.p });
    const { n, slug } = await t.launched();
    t.finish(slug);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    // What the turn left waiting is cancelled before the record is made.
    expect(s.cancelled).toEqual([slug]);
    expect(t.records(slug)[0]?.supervise).toEqual([
      expect.objectContaining({
        id: 'sr_aaaaaaaaaaaaaaaaaaaa',
        status: 'approved',
        decision: expect.objectContaining({ by: 'alice' }),
      }),
    ]);
  });

  it('resumes at once in a rebuilt image, with the decision as the prompt', async () => {
    const s = plane();
    const t = setup({ supervise: s.p });
    const asked = rebuiltResumes(t.runner);
    const { n, slug } = await t.launched();
    asked.set(slug, {
      requestId: 'sr_bbbbbbbbbbbbbbbbbbbb',
      prompt: 'the operator approved your capability-block request',
    });
    t.runner.agent(slug).exit(0);
    await until('resumed', () => t.runner.calls.some((c) => c.startsWith(`resume ${slug}`)));
    expect(t.runner.calls.filter((c) => c.startsWith('resume'))).toEqual([
      `resume ${slug} the operator approved your capability-block request`,
    ]);
    expect(t.records(slug)[0]?.watchdogFired).toMatchObject({
      reason: 'stopped',
      detail: expect.stringMatching(/sr_bbbb/),
    });
    await until('running again', () => t.row(n)?.status === 'running');
  });

  it('resumes a rebuilt bottle whose stopped turn named no session in a fresh one, and watches that turn', async () => {
    const s = plane();
    const t = setup({ supervise: s.p });
    const asked = rebuiltResumes(t.runner);
    const { n, slug } = await t.launched();
    // Its CLI was stopped before it named a session (as the runner records it).
    const env = { BB_HOME: t.home };
    writeMeta({ ...readMeta(slug, env)!, sessionId: null }, env);
    asked.set(slug, {
      requestId: 'sr_cccccccccccccccccccc',
      prompt: 'approved. The task, as your turn began: fix the bug',
    });
    t.runner.agent(slug).exit(143);
    await until('resumed', () => t.runner.resumes.length === 1);
    expect(t.runner.resumes[0]).toMatchObject({
      freshSession: true,
      prompt: expect.stringMatching(/fix the bug/),
    });
    await until('running again', () => t.row(n)?.status === 'running');
    // The turn in the new image is an ordinary one: its end is recorded and freezes the bottle.
    t.runner.agent(slug).exit(0);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    expect(t.records(slug).map((r) => r.turn)).toEqual([1, 2]);
  });

  it("cancels a destroyed bottle's pending requests", async () => {
    const s = plane();
    const t = setup({ supervise: s.p });
    const { n, slug } = await t.launched();
    s.waiting.add(slug);
    t.runner.agent(slug).openPr(31);
    await until('PR learned', () => t.row(n)?.prNumber === 31);
    await t.orch.accept(t.ev.closed(31));
    await until('destroyed', () => t.row(n)?.status === 'destroyed');
    // Cancelled when the turn ended (nobody is left to answer) and again, harmlessly, on destroy.
    expect(new Set(s.cancelled)).toEqual(new Set([slug]));
    expect(s.cancelled.length).toBeGreaterThanOrEqual(1);
  });
});
