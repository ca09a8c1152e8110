import { AGENT_LABEL_PREFIX, commentCreatedKey, type Forge, type ForgeEvent } from '@bb/forge';
import type { ForgeStateStore } from '@bb/state';

/**
 * One pass over the forge's REST API for what webhooks never delivered (Gitea
 * does not retry): open issues labelled for an agent that have no bottle, and
 * frozen bottles whose PR closed or whose issue or PR got human comments. Each change goes
 * through `accept`, under the same key a webhook would give it, so a change
 * seen both ways is acted on once. Looks at `repos` and every repository that
 * has a bottle. Returns how many events were new. Comments older than
 * `notBefore` are left alone (the ledger no longer knows them).
 */
export async function sweep(
  o: {
    store: ForgeStateStore;
    forgeFor: (owner: string, repo: string) => Forge;
    botLogin: string;
    accept: (event: ForgeEvent) => boolean | Promise<boolean>;
    /**
     * Changes older than this are not looked at: the delivery ledger forgets
     * keys past its retention, and a comment it forgot must not wake a bottle
     * again. Keep it well inside the retention.
     */
    notBefore?: Date;
    log?: (e: Record<string, unknown>) => void;
  },
  repos: Array<{ owner: string; repo: string }> = [],
): Promise<number> {
  const rows = await o.store.all();
  const targets = new Map<string, { owner: string; repo: string }>();
  for (const r of [...repos, ...rows.map((x) => ({ owner: x.owner, repo: x.repo }))])
    targets.set(`${r.owner}/${r.repo}`, { owner: r.owner, repo: r.repo });
  let n = 0;
  const push = async (e: ForgeEvent) => {
    if (await o.accept(e)) n++;
  };
  for (const { owner, repo } of targets.values()) {
    const forge = o.forgeFor(owner, repo);
    for (const issue of await forge.listOpenIssues()) {
      if (!issue.labels.some((l) => l.name.startsWith(AGENT_LABEL_PREFIX))) continue;
      const row = await o.store.get(owner, repo, issue.number);
      if (row && row.status !== 'destroyed') continue;
      await push({
        kind: 'issue_targeting_changed',
        action: 'edited',
        key: `sweep:${owner}/${repo}#${issue.number}:${issue.updatedAt}`,
        deliveryId: undefined,
        owner,
        repo,
        sender: issue.author,
        occurredAt: issue.updatedAt,
        issue: {
          number: issue.number,
          title: issue.title,
          labels: issue.labels.map((l) => l.name),
          assignees: issue.assignees.map((a) => a.login),
          state: issue.state,
        },
      });
    }
  }
  for (const row of rows) {
    if (row.status !== 'frozen') continue;
    const forge = o.forgeFor(row.owner, row.repo);
    const base = { deliveryId: undefined, owner: row.owner, repo: row.repo };
    const since = Math.max(Date.parse(row.createdAt), o.notBefore?.getTime() ?? 0);
    // Replies a frozen bottle missed: on its issue (PR or not) and on its PR.
    const comments = async (n: number, on: 'issue' | 'pr') => {
      for (const c of await forge.readComments(n)) {
        if (c.author.login === o.botLogin || Date.parse(c.createdAt) < since) continue;
        await push({
          ...base,
          kind: 'comment_created',
          key: commentCreatedKey(forge.kind, row.owner, row.repo, c.id),
          sender: c.author,
          occurredAt: c.createdAt,
          on,
          number: n,
          comment: { id: c.id, author: c.author.login, body: c.body, url: c.url },
        });
      }
    };
    await comments(row.issueNumber, 'issue');
    if (!row.prNumber) continue;
    const pr = await forge.readPr(row.prNumber);
    const ref = {
      number: pr.number,
      title: pr.title,
      body: pr.body,
      state: pr.state,
      head: pr.head.ref,
      headSha: pr.head.sha,
      base: pr.base.ref,
      author: pr.author.login,
    };
    if (pr.state === 'closed') {
      await push({
        ...base,
        kind: 'pr_closed',
        key: `sweep:${row.owner}/${row.repo}!${pr.number}:closed`,
        sender: pr.author,
        occurredAt: pr.closedAt ?? pr.updatedAt,
        pr: ref,
        merged: pr.merged,
        mergeCommitSha: pr.mergeCommitSha,
      });
      continue;
    }
    await comments(pr.number, 'pr');
  }
  if (n > 0) o.log?.({ msg: 'sweep found missed changes', events: n });
  return n;
}
