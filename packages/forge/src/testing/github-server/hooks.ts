/**
 * The GitHub test server's webhooks: each change of its world delivered as GitHub
 * delivers it (one POST per hook, `X-GitHub-Event`, `X-GitHub-Delivery`,
 * `X-Hub-Signature-256`), the payload built from the world's models in GitHub's shapes:
 * `issues` (opened, edited, closed, reopened, labeled, unlabeled, assigned, unassigned),
 * `issue_comment` (on issues and PRs), `pull_request` (opened, edited, closed,
 * reopened, synchronize, labeled, assigned) and `pull_request_review` (submitted).
 */
import { createHmac, randomUUID } from 'node:crypto';
import { request } from 'undici';
import type { IssueModel, RepoModel } from '../gitea-server/model';
import { type GhContext, ghComment, ghIssue, ghPull, ghRepo, ghReview, ghUser } from './shapes';
import TEMPLATES from './templates.json' with { type: 'json' };

export interface GitHubHook {
  id: number;
  url: string;
  secret: string;
  /** The events it takes (`*` all); what GitHub sends it is filtered by them. */
  events: string[];
  /** Where it hangs: `/repos/<owner>/<repo>/hooks` or `/orgs/<org>/hooks`; '' for one added by a test (everything). */
  scope: string;
  at: string;
}

export interface GitHubDelivery {
  id: string;
  hookId: number;
  event: string;
  action: string;
  body: string;
  headers: Record<string, string>;
  status: number | undefined;
  error: string | undefined;
}

type Payload = Record<string, unknown>;

export class GitHubHooks {
  readonly hooks: GitHubHook[] = [];
  readonly deliveries: GitHubDelivery[] = [];
  readonly #pending = new Set<Promise<void>>();
  #next = 1;

  constructor(readonly ctx: () => GhContext) {}

  add(url: string, secret: string, o: { events?: string[]; scope?: string } = {}): GitHubHook {
    const hook = {
      id: this.#next++,
      url,
      secret,
      events: o.events ?? ['*'],
      scope: o.scope ?? '',
      at: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
    };
    this.hooks.push(hook);
    return hook;
  }

  /** Wait until every queued delivery has finished. */
  async settle(): Promise<void> {
    while (this.#pending.size) await Promise.all([...this.#pending]);
  }

  /** A change of the world, as the Gitea-compatible world names it, delivered the way GitHub would. */
  fromWorld(repo: RepoModel, type: string, payload: Payload): void {
    const gh = this.translate(repo, type, payload);
    if (!gh || !this.hooks.length) return;
    const body = JSON.stringify(shapeLike(this.ctx(), gh.event, gh.action, gh.payload));
    const scopes = ['', `/repos/${repo.owner}/${repo.name}/hooks`, `/orgs/${repo.owner}/hooks`];
    for (const hook of this.hooks)
      if (
        scopes.includes(hook.scope) &&
        (hook.events.includes('*') || hook.events.includes(gh.event))
      )
        this.#track(this.#deliver(hook, gh.event, gh.action, body));
  }

  /** GitHub's event, action and payload for a change of the world, or undefined when GitHub sends none. */
  translate(
    repo: RepoModel,
    type: string,
    p: Payload,
  ): { event: string; action: string; payload: Payload } | undefined {
    const ctx = this.ctx();
    const number = Number(p['number'] ?? (p['issue'] as Payload | undefined)?.['number']);
    const issue = repo.issues.get(number);
    const sender = ghUser(
      ctx,
      String((p['sender'] as Payload | undefined)?.['login'] ?? repo.owner),
    );
    if (!issue) return undefined;
    const base = { repository: ghRepo(ctx, repo), sender };
    const of = (i: IssueModel) =>
      i.pull
        ? { pull_request: ghPull(ctx, repo, i), number: i.number }
        : { issue: ghIssue(ctx, repo, i) };
    const action = String(p['action'] ?? '');
    const last = issue.timeline.at(-1);
    switch (type) {
      case 'issues':
      case 'pull_request': {
        if (!['opened', 'closed', 'reopened', 'edited'].includes(action)) return undefined;
        const event = issue.pull ? 'pull_request' : 'issues';
        return {
          event,
          action,
          payload: {
            action,
            ...of(issue),
            ...(action === 'edited' ? { changes: p['changes'] ?? {} } : {}),
            ...base,
          },
        };
      }
      case 'issue_label':
      case 'pull_request_label': {
        const label = last?.type === 'label' ? last : undefined;
        if (!label?.label) return undefined;
        const a = label.labelRemoved ? 'unlabeled' : 'labeled';
        const l = repo.labels.get(label.label);
        return {
          event: issue.pull ? 'pull_request' : 'issues',
          action: a,
          payload: {
            action: a,
            ...of(issue),
            label: {
              id: l?.id ?? 0,
              node_id: '',
              url: '',
              name: label.label,
              color: l?.color ?? 'ededed',
              default: false,
              description: l?.description || null,
            },
            ...base,
          },
        };
      }
      case 'issue_assign':
      case 'pull_request_assign': {
        if (last?.type !== 'assignees' || !last.assignee) return undefined;
        return {
          event: issue.pull ? 'pull_request' : 'issues',
          action,
          payload: { action, ...of(issue), assignee: ghUser(ctx, last.assignee), ...base },
        };
      }
      case 'issue_comment':
      case 'pull_request_comment': {
        const c = issue.comments.at(-1);
        if (!c) return undefined;
        return {
          event: 'issue_comment',
          action: 'created',
          payload: {
            action: 'created',
            issue: ghIssue(ctx, repo, issue),
            comment: ghComment(ctx, repo, issue, c),
            ...base,
          },
        };
      }
      case 'pull_request_sync':
        return {
          event: 'pull_request',
          action: 'synchronize',
          payload: {
            action: 'synchronize',
            ...of(issue),
            before: '0'.repeat(40),
            after: issue.pull?.headSha,
            ...base,
          },
        };
      default: {
        if (!type.startsWith('pull_request_review') || !issue.pull) return undefined;
        const review = issue.reviews.at(-1);
        if (!review) return undefined;
        const shaped = ghReview(ctx, repo, issue, review);
        return {
          event: 'pull_request_review',
          action: 'submitted',
          payload: {
            action: 'submitted',
            review: { ...shaped, state: String(shaped['state']).toLowerCase() },
            pull_request: ghPull(ctx, repo, issue, true),
            ...base,
          },
        };
      }
    }
  }

  #track(p: Promise<void>): void {
    this.#pending.add(p);
    void p.finally(() => this.#pending.delete(p));
  }

  async #deliver(hook: GitHubHook, event: string, action: string, body: string): Promise<void> {
    const id = randomUUID();
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': 'GitHub-Hookshot/bb-test',
      'x-github-event': event,
      'x-github-delivery': id,
      'x-github-hook-id': String(hook.id),
      'x-hub-signature-256': `sha256=${createHmac('sha256', hook.secret).update(body).digest('hex')}`,
    };
    const d: GitHubDelivery = {
      id,
      hookId: hook.id,
      event,
      action,
      body,
      headers,
      status: undefined,
      error: undefined,
    };
    this.deliveries.push(d);
    try {
      const res = await request(hook.url, {
        method: 'POST',
        headers,
        body,
        signal: AbortSignal.timeout(10_000),
      });
      await res.body.dump();
      d.status = res.statusCode;
    } catch (err) {
      d.error = (err as Error).message;
    }
  }
}

const isObj = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Keys a delivery keeps though its event's example may lack them (they say what the change is). */
const ALWAYS = new Set(['pull_request', 'label', 'assignee', 'changes', 'before', 'after']);

/** Which union of examples (templates.json `webhookObjects`) shapes the payload's own objects... */
const TOP: Record<string, string> = {
  issue: 'issue',
  comment: 'comment',
  repository: 'repository',
  review: 'review',
  label: 'label',
  pull_request: 'pull_request',
};
/** ...and the objects of a kind wherever they are. */
const NESTED: Record<string, string> = {
  labels: 'label',
  repo: 'repository',
  user: 'user',
  sender: 'user',
  assignee: 'user',
  assignees: 'user',
  owner: 'user',
  merged_by: 'user',
  requested_reviewers: 'user',
};

/**
 * `v` in the shape of GitHub's examples: the keys of the event's example `t` and of every
 * example of the same kind of object (some examples are older than GitHub's schema),
 * the example's own values where `v` has none, and no other key.
 */
function conform(
  t: unknown,
  v: unknown,
  rich: Record<string, unknown>,
  key = '',
  depth = 0,
): unknown {
  const kind = (depth === 1 ? TOP[key] : undefined) ?? NESTED[key];
  const union = kind ? rich[kind] : undefined;
  if (Array.isArray(t) || Array.isArray(v)) {
    const item = union ?? (Array.isArray(t) ? t[0] : undefined);
    return Array.isArray(v) && item !== undefined
      ? v.map((x) => conform(item, x, rich, '', depth + 1))
      : v;
  }
  if (!isObj(v)) return v === undefined ? t : v;
  const shape = isObj(union) ? { ...union, ...(isObj(t) ? t : {}) } : isObj(t) ? t : undefined;
  if (!shape) return v;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(shape))
    out[k] = v[k] === undefined ? shape[k] : conform(shape[k], v[k], rich, k, depth + 1);
  for (const k of ALWAYS) if (!(k in shape) && v[k] !== undefined) out[k] = v[k];
  return out;
}

/**
 * A delivery's payload shaped like GitHub's own example of that event and action
 * (@octokit/webhooks-examples, with the server's hosts): webhook objects are not the REST
 * API's, and GitHub's webhook schemas allow no other keys.
 */
export function shapeLike(
  ctx: GhContext,
  event: string,
  action: string,
  payload: Payload,
): Payload {
  const hooks = TEMPLATES.webhooks as Record<string, unknown>;
  const example =
    hooks[`${event}$${action}`] ??
    Object.entries(hooks).find(([k]) => k.startsWith(`${event}$`))?.[1];
  if (!example) return payload;
  const t = JSON.parse(
    JSON.stringify(example)
      .replaceAll('https://api.github.com', ctx.api)
      .replaceAll('https://github.com', ctx.web),
  ) as Payload;
  // Fields of the example's own installation, organisation and enterprise are not the world's.
  for (const k of ['installation', 'organization', 'enterprise']) delete t[k];
  const rich = JSON.parse(
    JSON.stringify(TEMPLATES.webhookObjects)
      .replaceAll('https://api.github.com', ctx.api)
      .replaceAll('https://github.com', ctx.web),
  ) as Record<string, unknown>;
  // A review's PR is the simple one of review events, not a pull_request event's.
  if (event !== 'pull_request') rich['pull_request'] = rich['simple_pull_request'];
  return conform(t, payload, rich) as Payload;
}
