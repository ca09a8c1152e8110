// What an orchestrator tells people goes through its lease: one that lost the issue
// neither posts nor notes in the ledger that it posted (the note would stop the new
// holder from saying it).
import type { Forge } from '@bb/forge';
import { MemoryForgeStateStore } from '@bb/state';
import { describe, expect, it } from 'vitest';
import { Feedback } from '../src/feedback';

describe('feedback after the issue changed hands', () => {
  it('is neither posted nor noted; the holder then says it once', async () => {
    const inbox = new MemoryForgeStateStore();
    const posted: string[] = [];
    const forge = {
      postComment: async (_n: number, body: string) => posted.push(body),
    } as unknown as Forge;
    const feedbackOf = (mayWrite: () => Promise<boolean>) =>
      new Feedback({ inbox, forgeFor: () => forge, mayWrite, log: () => {} });
    const stale = feedbackOf(async () => false);
    await stale.say('acme/app#1', 'bot-bottle could not start agent x');
    await stale.turnOutcome('acme/app#1', 1, 'the agent stopped', 'turn:x:1');
    expect(posted).toEqual([]);
    expect(await inbox.recentEvents('bb:feedback:', 10)).toEqual([]);
    // The new holder (another process, the same ledger) says each once.
    const holder = feedbackOf(async () => true);
    await holder.say('acme/app#1', 'bot-bottle could not start agent x');
    await holder.turnOutcome('acme/app#1', 1, 'the agent stopped', 'turn:x:1');
    await new Promise((r) => setTimeout(r, 20));
    expect(posted).toHaveLength(2);
    expect(await inbox.recentEvents('bb:feedback:', 10)).toHaveLength(2);
  });
});
