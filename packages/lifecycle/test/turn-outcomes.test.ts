// A turn that ends without signal_done is told on its thread, once: what happened, that
// the work is kept, how to go on. Once holds across a restart (the delivery ledger); a
// forge that fails the comment has it tried again and given up, and the issue goes on.
import type { Forge } from '@bb/forge';
import { MemoryForge } from '@bb/forge/testing';
import { describe, expect, it } from 'vitest';
import { Feedback } from '../src/feedback';
import { OWNER, REPO, setup, until } from './orchestrator-setup';

const bodies = (t: ReturnType<typeof setup>, n: number) =>
  t.world
    .repo(OWNER, REPO)
    .items.get(n)!
    .comments.map((c) => c.body);

/** A PR of the bot's in the forge's world: its number. */
async function openPr(t: ReturnType<typeof setup>): Promise<number> {
  const head = `bb/pr-${Math.random().toString(16).slice(2, 8)}`;
  t.world.pushBranch(OWNER, REPO, head);
  const forge = new MemoryForge({ owner: OWNER, repo: REPO, as: 'bb-bot', world: t.world });
  return (await forge.openPr({ head, base: 'main', title: 'Fix', body: 'Fixes it.' })).number;
}

describe('turn outcomes on the thread', () => {
  it('an agent that exits without signal_done: one comment on its PR saying so, with how to go on', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    const pr = await openPr(t);
    t.runner.agent(slug).openPr(pr);
    t.runner.agent(slug).exit(3);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await until('told', () => bodies(t, pr).length === 1);
    const [said] = bodies(t, pr);
    expect(said).toContain('The agent stopped (exit code 3) without saying it was done.');
    expect(said).toContain('Its work so far is kept');
    expect(said).toContain('Reply here to have it carry on.');
    expect(bodies(t, n)).toEqual([]);
    // The record, not the comment, holds the details.
    expect(said).not.toContain(slug);
    expect(t.orch.notices.map((x) => x.message)).toContain(said);
  });

  it('the watchdog stopping a silent agent: one comment on the issue', async () => {
    const t = setup({ watchdogTimeoutMs: 200 });
    const { n, slug } = await t.launched();
    await t.silenceFires(n, slug);
    await until('told', () => bodies(t, n).length === 1);
    expect(bodies(t, n)[0]).toMatch(/^The agent went quiet \(no check-in for \d+ s/);
  });

  it('an agent that signals done says what it wants itself: nothing more is posted', async () => {
    const t = setup();
    const { n, slug } = await t.launched();
    const pr = await openPr(t);
    t.finish(slug, pr);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await t.orch.idle();
    await new Promise((r) => setTimeout(r, 100));
    expect(bodies(t, n)).toEqual([]);
    expect(bodies(t, pr)).toEqual([]);
  });

  it('turned off, nothing is posted; the notice is still kept for status and the dashboard', async () => {
    const t = setup({ turnOutcomes: false });
    const { n, slug } = await t.launched();
    t.runner.agent(slug).exit(1);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await until('noticed', () => t.orch.notices.length === 1);
    expect(bodies(t, n)).toEqual([]);
  });

  it('once per turn across a restart: a second orchestrator on the same ledger says nothing again', async () => {
    const t = setup();
    const posted: string[] = [];
    const forge = {
      postComment: async (_n: number, b: string) => void posted.push(b),
    } as unknown as Forge;
    const make = () =>
      new Feedback({ inbox: t.options.inbox, forgeFor: () => forge, log: () => {} });
    const key = `${OWNER}/${REPO}#7`;
    await make().turnOutcome(key, 7, 'The agent went quiet.', 'turn:claude-abcde:1');
    await make().turnOutcome(key, 7, 'The agent went quiet.', 'turn:claude-abcde:1');
    await make().turnOutcome(key, 7, 'The agent went quiet again.', 'turn:claude-abcde:2');
    await until('posted', () => posted.length === 2);
    expect(posted).toEqual(['The agent went quiet.', 'The agent went quiet again.']);
  });

  it('a forge that fails the comment: tried again, then given up with a log line; the issue goes on', async () => {
    const t = setup();
    let failures = 0;
    t.setForge((owner, repo) => {
      const f = new MemoryForge({ owner, repo, as: 'bb-bot', world: t.world });
      f.postComment = async () => {
        failures++;
        throw new Error('the forge answered 502');
      };
      return f;
    });
    const { n, slug } = await t.launched();
    t.runner.agent(slug).openPr(52);
    t.runner.agent(slug).exit(1);
    await until('frozen', () => t.row(n)?.status === 'frozen');
    await until('given up', () =>
      t.logs.some((l) => l['msg'] === 'could not post: turn outcome; giving up'),
    );
    // The first try and one per wait (the setup waits 100 ms three times).
    expect(failures).toBe(4);
    expect(
      t.logs.filter((l) => l['msg'] === 'could not post: turn outcome; will retry'),
    ).toHaveLength(3);
    // Nothing wedged: a reply resumes the bottle.
    await t.orch.accept(t.ev.comment(52, 'go on'));
    await until('resumed', () => t.runner.resumes.length === 1);
  });

  it('an event given up after its retries is told once on the issue', async () => {
    const t = setup();
    const n = t.issue();
    t.beforeReadIssue(() => {
      throw new Error('the forge is down');
    });
    await t.orch.accept(t.ev.targeted(n));
    await until('given up', () => t.logs.some((l) => l['msg'] === 'event failed; giving up'));
    await until('told', () => bodies(t, n).length === 1);
    expect(bodies(t, n)[0]).toMatch(
      /^bot-bottle could not act on the request to start the agent after 4 tries \(the operator's log has the error\)\. Comment again, or give the issue back to the bot/,
    );
    // The error, which may name internal hosts and paths, stays in the log.
    expect(bodies(t, n)[0]).not.toContain('the forge is down');
    expect(t.logs.find((l) => l['msg'] === 'event failed; giving up')?.['error']).toContain(
      'the forge is down',
    );
  });
});
