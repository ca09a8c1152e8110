import type { PoolRoom, RunnerPool } from '@bb/headless';
import { describe, expect, it } from 'vitest';
import { reconcile } from '../src/reconcile';
import { GiB, setup, until } from './orchestrator-setup';

const MiB = 1024 ** 2;

/** A warm pool with no Docker: pooled slugs made whenever its caller says there is room. */
class FakePool implements RunnerPool {
  readonly ready: string[] = [];
  readonly made: string[] = [];
  readonly dropped: string[] = [];
  #room: PoolRoom | undefined;
  #n = 0;
  constructor(
    readonly size: number,
    readonly bytes: number,
  ) {}
  take(agent: string): string | undefined {
    const slug = this.ready.find((s) => s.startsWith(`${agent}-`));
    if (!slug) return undefined;
    this.ready.splice(this.ready.indexOf(slug), 1);
    queueMicrotask(() => this.#fill());
    return slug;
  }
  fill(room: PoolRoom): void {
    this.#room = room;
    this.#fill();
  }
  #fill(): void {
    while (this.#room && this.ready.length < this.size && this.#room.room(this.bytes)) {
      const slug = `claude-p${this.#n++}`;
      this.ready.push(slug);
      this.made.push(slug);
      this.#room.made?.(slug, this.bytes);
    }
  }
  owns(slug: string): boolean {
    return this.ready.includes(slug);
  }
  held() {
    return this.ready.map((slug) => ({ slug, agent: 'claude', bytes: this.bytes }));
  }
  async drop(slug: string): Promise<boolean> {
    if (!this.owns(slug)) return false;
    this.ready.splice(this.ready.indexOf(slug), 1);
    this.dropped.push(slug);
    this.#room?.gone?.(slug);
    return true;
  }
  async discard(slug: string): Promise<void> {
    this.dropped.push(slug);
  }
  async close(): Promise<void> {
    this.ready.length = 0;
  }
}

describe('the warm pool', () => {
  it('launches an issue into a pooled bottle, counts the pool in the budget and refills it', async () => {
    const t = setup({ capacity: { maxStarting: 2, memoryBudget: 8 * GiB } });
    const pool = new FakePool(1, 64 * MiB);
    Object.assign(t.runner, { pool });
    t.orch.startPool();
    expect(pool.ready).toEqual(['claude-p0']);
    expect(t.orch.capacity.used).toBe(64 * MiB);
    const n = t.issue();
    await t.orch.accept(t.ev.targeted(n));
    await until('launched', () => t.runner.isRunning('claude-p0'));
    // The pooled bottle is the issue's: its row names it, it counts as running now.
    expect(t.slugOf(n)).toBe('claude-p0');
    expect(t.orch.capacity.isRunning('claude-p0')).toBe(true);
    expect(t.orch.capacity.pooled()).toEqual([{ slug: 'claude-p1', bytes: 64 * MiB }]);
    // Taken once: the next issue gets the refilled one, never the same.
    const m = t.issue();
    await t.orch.accept(t.ev.targeted(m));
    await until('launched', () => t.runner.isRunning('claude-p1'));
    expect(t.slugOf(m)).toBe('claude-p1');
  });

  it('makes no pooled bottle the budget has no room for, and removes one when a launch needs the room', async () => {
    const t = setup({ capacity: { maxStarting: 2, memoryBudget: 2 * GiB } });
    t.runner.bytes = GiB;
    const pool = new FakePool(3, 600 * MiB);
    Object.assign(t.runner, { pool });
    t.orch.startPool();
    // Three would take 1.8 GiB of 2: all three fit before anything runs.
    expect(pool.ready).toHaveLength(3);
    // A launch of another agent needs 1 GiB: pooled bottles give way (the oldest first).
    const n = t.issue('review it', 'reviewer');
    await t.orch.accept(
      t.ev.targeted(n, { labels: ['bot-bottle:reviewer'], assignees: ['bb-bot'] }),
    );
    await until('launched', () => t.runner.isRunning(t.slugOf(n)));
    expect(t.slugOf(n)).toMatch(/^reviewer-/);
    expect(pool.dropped.length).toBeGreaterThanOrEqual(1);
    expect(t.orch.capacity.used).toBeLessThanOrEqual(2 * GiB);
  });

  it('a pooled bottle taken for a launch that fails is removed, never handed out again', async () => {
    const t = setup();
    const pool = new FakePool(1, 64 * MiB);
    Object.assign(t.runner, { pool });
    t.orch.startPool();
    t.runner.failNext('launch');
    const n = t.issue();
    await t.orch.accept(t.ev.targeted(n));
    await until('discarded', () => pool.dropped.includes('claude-p0'));
    expect(t.orch.capacity.pooled().map((p) => p.slug)).not.toContain('claude-p0');
    // The event is tried again, in another bottle.
    await until('launched', () => t.runner.isRunning(t.slugOf(n)));
    expect(t.slugOf(n)).not.toBe('claude-p0');
  });

  it("a reconcile leaves this process's pooled bottles alone", async () => {
    const t = setup();
    const pool = new FakePool(1, 64 * MiB);
    Object.assign(t.runner, { pool });
    t.orch.startPool();
    // As the real runner lists them: containers of a bottle with no row.
    const ours = t.runner.ours.bind(t.runner);
    Object.assign(t.runner, {
      ours: async () => [
        ...(await ours()),
        { id: 'c-pooled', labels: { 'bb.slug': 'claude-p0', 'bb.role': 'agent' } },
      ],
    });
    const report = await reconcile(t.orch, { store: t.store, runner: t.runner });
    expect(report.orphansRemoved).not.toContain('claude-p0');
    expect(t.runner.calls).not.toContain('destroy claude-p0');
  });
});
