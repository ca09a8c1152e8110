import { describe, expect, it } from 'vitest';
import { checkName, evaluateTargeting } from './targeting';

const members = new Set(['bb-claude']);
const isMember = async (_org: string, user: string) => members.has(user);
const target = (labels: string[], assignees: string[] = ['bb-claude']) =>
  evaluateTargeting({ labels, assignees }, { isMember });

describe('evaluateTargeting', () => {
  it('targets an issue with one agent label and an org member assigned', async () => {
    const r = await target(['bug', 'bot-bottle:implementer']);
    expect(r).toMatchObject({
      targeted: true,
      agent: 'implementer',
      bottle: undefined,
      assignee: 'bb-claude',
    });
  });

  it('takes the bottle override label', async () => {
    expect(await target(['bot-bottle:implementer', 'bot-bottle-bottle:with-node'])).toMatchObject({
      targeted: true,
      bottle: 'with-node',
    });
  });

  it.each([
    [['bug'], /no valid bot-bottle:<agent> label/],
    [['bot-bottle:a', 'bot-bottle:b'], /several agent labels/],
    [['bot-bottle:'], /the name is empty/],
    [['bot-bottle:../../etc'], /contains a path/],
    [['bot-bottle:Implementer'], /must match/],
    [['bot-bottle:implementеr'], /non-ASCII/], // Cyrillic е
    [['bot\u2010bottle:implementer'], /look-alike/], // Unicode hyphen
    [['ｂot-bottle:implementer'], /look-alike/], // full-width b
    [
      ['bot-bottle:implementer', 'bot-bottle-bottle:a', 'bot-bottle-bottle:b'],
      /several bottle labels/,
    ],
    [['bot-bottle:implementer', 'bot-bottle-bottle:../x'], /invalid bot-bottle label/],
    [[`bot-bottle:${'a'.repeat(64)}`], /must match/],
  ])('does not target %j', async (labels, reason) => {
    const r = await target(labels);
    expect(r.targeted).toBe(false);
    expect(r.reasons.join(' | ')).toMatch(reason);
  });

  it('needs an assignee who is an org member, and "cannot tell" is not membership', async () => {
    expect((await target(['bot-bottle:x'], [])).reasons.join()).toMatch(/no assignee/);
    expect((await target(['bot-bottle:x'], ['alice'])).reasons.join()).toMatch(
      /alice is not a member of bot-bottle/,
    );
    const unsure = await evaluateTargeting(
      { labels: ['bot-bottle:x'], assignees: ['bb-claude'] },
      { isMember: async () => undefined, org: 'bots' },
    );
    expect(unsure.targeted).toBe(false);
    expect(unsure.reasons.join()).toMatch(/could not tell whether bb-claude is a member of bots/);
    const throws = await evaluateTargeting(
      { labels: ['bot-bottle:x'], assignees: ['alice', 'bb-claude'] },
      { isMember: async (_o, u) => (u === 'alice' ? Promise.reject(new Error('303')) : true) },
    );
    expect(throws.targeted).toBe(true);
    expect(throws.assignee).toBe('bb-claude');
  });

  it('asks about membership only when the labels qualify', async () => {
    let asked = 0;
    await evaluateTargeting(
      { labels: ['bug'], assignees: ['bb-claude'] },
      {
        isMember: async () => {
          asked++;
          return true;
        },
      },
    );
    expect(asked).toBe(0);
  });

  it('checkName accepts the documented pattern', () => {
    for (const ok of ['a', 'implementer', 'x-1.2_3', '0']) expect(checkName(ok)).toBeUndefined();
    for (const bad of ['', '-a', '.a', 'A', 'a/b', 'a b']) expect(checkName(bad)).toBeDefined();
  });
});
