import { randomBytes } from 'node:crypto';
import { settledCode as code } from '@bb/errors';
import { LABEL } from '@bb/names';
import { afterAll, describe, expect, it } from 'vitest';
import type { ForgeWiring } from './layout';
import type { BottleRunner } from './runner';

/** What the suite needs of a runner under test. */
export interface RunnerConformanceOptions {
  /**
   * A runner whose bottles can run the script agents in `agents` (name →
   * agent manifest: write them where the runner reads manifests, with a default
   * bottle), and a forge they reach: `forge()` wires a new issue of it.
   */
  create: (agents: Record<string, unknown>) => Promise<{
    runner: BottleRunner;
    forge: () => ForgeWiring | Promise<ForgeWiring>;
    close?: () => Promise<void>;
  }>;
  /** How long one turn may take here. @default 60 s */
  turnMs?: number;
}

const script = (turns: unknown[]) => ({
  provider: 'script',
  git: { name: 'Conformance', email: 'conformance@example.test' },
  script: { turns },
});

/**
 * The behaviour every bottle runner (`BottleRunner`: an engine's bottles through
 * `headlessRunner`, or a platform's own) must show the orchestrator, with real
 * turns of the script agent: a launch returns with its agent running; the turn's
 * end is recorded in the bottle (its meta through `storage`) and freezes it; what
 * the gate relayed is there to drain; a resume continues the same session; a
 * stopped agent ends its turn; a running or unknown bottle is not resumed; destroy
 * removes every part and its state, and is harmless twice; `ours` lists the
 * runner's bottles. A runner that breaks any of these fails it.
 */
export function describeRunnerConformance(name: string, options: RunnerConformanceOptions): void {
  describe(`BottleRunner conformance: ${name}`, () => {
    const turnMs = options.turnMs ?? 60_000;
    let made: Awaited<ReturnType<RunnerConformanceOptions['create']>> | undefined;
    const world = async () => {
      made ??= await options.create({
        'conf-talk': script([
          { steps: [{ do: 'read_issue' }, { do: 'done', status: 'success', summary: 'one' }] },
          { steps: [{ do: 'done', status: 'success', summary: 'two' }] },
        ]),
        'conf-slow': script([{ steps: [{ do: 'sleep', ms: 120_000 }] }]),
      });
      return made;
    };
    afterAll(async () => {
      await made?.close?.();
    });
    const slugOf = (agent: string) => `${agent}-${randomBytes(3).toString('hex')}`;
    /** Launch a fresh bottle of `agent`; its runner and slug. */
    const launch = async (agent: 'conf-talk' | 'conf-slow', prompt: string) => {
      const { runner, forge } = await world();
      const slug = slugOf(agent);
      await runner.startLaunch({ agent, slug, prompt, forge: await forge() });
      return { runner, slug };
    };
    /** Launch a bottle, check it with `check`, and destroy it whatever happens. */
    const withBottle = async (
      agent: 'conf-talk' | 'conf-slow',
      prompt: string,
      check: (runner: BottleRunner, slug: string) => Promise<void>,
    ) => {
      const { runner, slug } = await launch(agent, prompt);
      try {
        await check(runner, slug);
      } finally {
        await runner.destroy(slug);
      }
    };

    it(
      'a launch runs the agent; its turn ends recorded and frozen, with what the gate relayed; a resume continues its session',
      () =>
        withBottle('conf-talk', 'first', async (runner, slug) => {
          const first = await runner.finishTurn(slug);
          expect(first, first.output).toMatchObject({ slug, exitCode: 0, ok: true });
          expect(first.sessionId, 'the turn has a session').toBeTruthy();
          const meta = await runner.storage.meta(slug);
          expect(meta?.status).toBe('frozen');
          expect(meta?.turns.map((t) => [t.turn, t.ok])).toEqual([[1, true]]);
          const relayed: string[] = [];
          await runner.storage.drainQueue(slug, (e) => {
            relayed.push(e.type);
          });
          expect(relayed, "the gate's done signal").toContain('done');
          expect(await runner.storage.hasOperations(slug), 'the gate logged its calls').toBe(true);
          await runner.startResume({ slug, prompt: 'second' });
          const second = await runner.finishTurn(slug);
          expect(second, second.output).toMatchObject({ exitCode: 0, ok: true });
          expect(second.sessionId, 'the same session').toBe(first.sessionId);
          expect((await runner.storage.meta(slug))?.turns.map((t) => t.turn)).toEqual([1, 2]);
        }),
      turnMs * 3,
    );

    it(
      'a stopped agent ends its turn, and a running or unknown bottle is not resumed',
      () =>
        withBottle('conf-slow', 'wait', async (runner, slug) => {
          expect(await code(runner.startResume({ slug, prompt: 'again' }))).toBe('CONFLICT');
          expect(await code(runner.startResume({ slug: slugOf('conf-none'), prompt: 'x' }))).toBe(
            'NOT_FOUND',
          );
          const ending = runner.finishTurn(slug);
          await runner.stopAgent(slug, 1000);
          const outcome = await ending;
          expect(outcome.ok, 'a stopped turn did not succeed').toBe(false);
          expect((await runner.storage.meta(slug))?.status).toBe('frozen');
        }),
      turnMs * 2,
    );

    it(
      'destroy removes every part and its state, and is harmless twice; ours lists the bottle while it exists',
      async () => {
        const { runner, slug } = await launch('conf-talk', 'first');
        const parts = async () =>
          (await runner.ours()).filter((c) => c.labels[LABEL.slug] === slug).length;
        expect(await parts(), 'its parts are listed').toBeGreaterThan(0);
        expect((await runner.containers(slug)).length).toBeGreaterThan(0);
        await runner.finishTurn(slug);
        await runner.destroy(slug);
        expect(await parts()).toBe(0);
        expect(await runner.containers(slug)).toEqual([]);
        expect(await runner.storage.meta(slug), 'its state is gone').toBeUndefined();
        expect(await code(runner.destroy(slug))).toBe('resolved');
      },
      turnMs * 2,
    );
  });
}
