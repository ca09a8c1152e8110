import { evaluateTargeting } from '@bb/forge';
import { mayDrive, reviewPrompt } from './conversation';
import type { Core } from './core';
import type { FactNeed, Facts } from './decide';
import { parseIssueKey } from './routing';

/** The trigger policy of `core`'s options (who may drive an agent). */
export function triggerPolicy(core: Core) {
  return {
    org: core.o.org ?? 'bot-bottle',
    botLogin: core.o.botLogin,
    ...(core.o.mentionOnly ? { mentionOnly: true } : {}),
  };
}

/** Read from the forge what `decide` asked for about `key`'s issue, adding to `facts`. */
export async function gatherFacts(core: Core, key: string, needs: FactNeed[], facts: Facts) {
  const { owner, repo, issue } = parseIssueKey(key);
  const forge = core.forgeFor(owner, repo);
  for (const need of needs) {
    switch (need.type) {
      case 'targeting': {
        const fresh = await forge.readIssue(issue);
        const labels = fresh.labels.map((l) => l.name);
        const assignees = fresh.assignees.map((a) => a.login);
        const targeting = await evaluateTargeting(
          { labels, assignees },
          {
            org: core.o.org ?? 'bot-bottle',
            isMember: (org, user) => forge.isOrgMember(org, user).catch(() => undefined),
          },
        );
        facts.issue = {
          state: fresh.state,
          title: fresh.title,
          body: fresh.body,
          labels,
          assignees,
          targeting,
        };
        break;
      }
      case 'open_prs': {
        let open = false;
        for (const pr of need.prs) if (await forge.isPrOpen(pr)) open = true;
        facts.openPr = open;
        break;
      }
      case 'may_drive':
        facts.may = await mayDrive(forge, triggerPolicy(core), need.author, need.body);
        break;
      case 'review':
        facts.review = await reviewPrompt(forge, {
          author: need.author,
          pr: need.pr,
          state: need.state,
          body: need.body,
          url: need.url,
        });
        break;
    }
  }
  return facts;
}
