// The orchestrator as its tests drive it: a memory forge, real SQLite state,
// the runner double, and helpers to make forge events and wait for outcomes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Forge, ForgeEvent } from '@bb/forge';
import { MemoryForge, MemoryForgeWorld } from '@bb/forge/testing';
import { ProvenanceStore } from '@bb/provenance';
import { BbDatabase, SqliteForgeStateStore } from '@bb/state';
import { afterEach, expect } from 'vitest';
import { Orchestrator, type OrchestratorOptions } from '../src/orchestrator';
import { issueKey } from '../src/routing';
import { fakeOrchestratorOptions } from './fake-orchestrator';
import { FakeRunner } from './fake-runner';

export const GiB = 1024 ** 3;
export const OWNER = 'acme';
export const REPO = 'app';

/** Wait until `cond` holds (polling); fails with `what` after `ms`. */
export async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 5000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export const cleanups: Array<() => void> = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** What the agent is told of alice's comment on PR `pr`. */
export const said = (pr: number, body: string) => `alice commented on your PR #${pr}:\n\n> ${body}`;

/** A PR as events carry it: the bot's PR `number` from its bottle branch onto main. */
export function prRef(
  number: number,
  over: { title?: string; state?: 'open' | 'closed'; head?: string; headSha?: string } = {},
) {
  return {
    number,
    title: over.title ?? 'Fix',
    body: '',
    state: over.state ?? 'open',
    head: over.head ?? 'feature',
    headSha: over.headSha ?? 'a'.repeat(40),
    base: 'main',
    author: 'bb-bot',
  };
}

export function setup(over: Partial<OrchestratorOptions> = {}, existing?: { home: string }) {
  const home = existing?.home ?? mkdtempSync(join(tmpdir(), 'bb-orch-'));
  const world = new MemoryForgeWorld();
  world.addMember('bot-bottle', 'bb-bot');
  // The maintainer who comments may write to the repository: comments by others drive nothing.
  world.grant(OWNER, REPO, 'alice', 'write');
  const db = BbDatabase.open({ path: join(home, 'bb.db') });
  const store = new SqliteForgeStateStore({ database: db });
  const prov = new ProvenanceStore(db);
  const runner = new FakeRunner(home);
  const logs: Array<Record<string, unknown>> = [];
  let forgeFor: (o: string, r: string) => Forge = (owner, repo) =>
    new MemoryForge({ owner, repo, as: 'bb-bot', world });
  const options: OrchestratorOptions = {
    ...fakeOrchestratorOptions({
      home,
      store,
      provenance: prov,
      runner,
      world,
      forgeFor: (o, r) => forgeFor(o, r),
    }),
    pollMs: 10,
    gateCheckMs: 30,
    doneGraceMs: 150,
    retryMs: [100, 100, 100],
    capacity: { maxStarting: 2, memoryBudget: 64 * GiB },
    log: (e) => logs.push(e),
    ...over,
  };
  const orch = new Orchestrator(options);
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    orch.close();
    db.close();
  };
  cleanups.push(() => {
    close();
    if (!existing) rmSync(home, { recursive: true, force: true });
  });
  let clock = Date.parse('2026-06-01T00:00:00Z');
  const at = () => {
    clock += 1000;
    return new Date(clock).toISOString();
  };
  const sender = { id: 7, login: 'alice' };
  const issue = (title = 'fix the bug', agent = 'claude') =>
    world.addIssue(OWNER, REPO, {
      title,
      author: 'alice',
      labels: [`bot-bottle:${agent}`],
      assignees: ['bb-bot'],
    });
  const ev = {
    targeted: (
      n: number,
      hint = { labels: ['bot-bottle:claude'], assignees: ['bb-bot'] },
    ): ForgeEvent => ({
      kind: 'issue_targeting_changed',
      action: 'assigned',
      key: `t:${n}:${at()}`,
      deliveryId: undefined,
      owner: OWNER,
      repo: REPO,
      sender,
      occurredAt: at(),
      issue: { number: n, title: 't', ...hint, state: 'open' },
    }),
    /** A comment on PR `pr` by alice (or on issue `pr`, by `by.author`, with `by.on`). */
    comment: (
      pr: number,
      body: string,
      id = Math.floor(Math.random() * 1e9),
      by: { author?: string; on?: 'issue' | 'pr' } = {},
    ): ForgeEvent => ({
      kind: 'comment_created',
      key: `c:${id}`,
      deliveryId: undefined,
      owner: OWNER,
      repo: REPO,
      sender,
      occurredAt: at(),
      on: by.on ?? 'pr',
      number: pr,
      comment: { id, author: by.author ?? 'alice', body },
    }),
    closed: (pr: number, head = 'feature'): ForgeEvent => ({
      kind: 'pr_closed',
      key: `closed:${pr}:${at()}`,
      deliveryId: undefined,
      owner: OWNER,
      repo: REPO,
      sender,
      occurredAt: at(),
      pr: prRef(pr, { title: 'p', state: 'closed', head }),
      merged: false,
      mergeCommitSha: null,
    }),
  };
  const row = (n: number) => store.get(OWNER, REPO, n);
  const slugOf = (n: number) => orch.bottle(issueKey(OWNER, REPO, n))?.slug ?? '';
  const records = (slug: string) => prov.chain(slug).map((r) => r.record);
  /** A new targeted issue, accepted, its agent running: its number and slug. */
  const launched = async (title?: string, agent?: string) => {
    const n = issue(title, agent);
    await orch.accept(ev.targeted(n));
    await until('running', () => runner.isRunning(slugOf(n)));
    return { n, slug: slugOf(n) };
  };
  /** The agent of `slug` signals done (after opening PR `pr`, when given) and exits 0. */
  const finish = (slug: string, pr?: number) => {
    if (pr !== undefined) runner.agent(slug).openPr(pr);
    runner.agent(slug).done();
    runner.agent(slug).exit(0);
  };
  /** 250 ms more of silence, and the watchdog stops issue `n`'s agent: frozen, recorded as silence. */
  const silenceFires = async (n: number, slug: string, what = 'silence fired') => {
    await new Promise((r) => setTimeout(r, 250));
    await orch.checkWatchdog();
    await until(what, () => row(n)?.status === 'frozen');
    expect(records(slug)[0]?.watchdogFired).toMatchObject({ reason: 'silence' });
  };
  return {
    silenceFires,
    launched,
    finish,
    home,
    world,
    db,
    store,
    prov,
    runner,
    orch,
    logs,
    ev,
    issue,
    row,
    slugOf,
    records,
    close,
    options,
    setForge: (f: typeof forgeFor) => {
      forgeFor = f;
    },
    /** Run `before` ahead of every read of an issue (it may throw, as a failing forge would). */
    beforeReadIssue: (before: (n: number) => void) => {
      forgeFor = (owner, repo) => {
        const f = new MemoryForge({ owner, repo, as: 'bb-bot', world });
        const readIssue = f.readIssue.bind(f);
        f.readIssue = async (i) => {
          before(i);
          return readIssue(i);
        };
        return f;
      };
    },
  };
}
