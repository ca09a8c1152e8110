// "Lab": a second, complete forge kind, written as a third party would write theirs,
// from @bb/forge's public API alone. Its REST API, its auth (Bearer tokens), its git
// paths and its webhooks (their headers, signature and payload) are its own; the double
// it talks to in the tests is ./server.ts.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { BbError, type BbErrorCode } from '@bb/errors';
import {
  type Comment,
  commentCreatedKey,
  defaultBottleBranches,
  Forge,
  type ForgeKind,
  type ForgeSite,
  type GitRemote,
  header,
  type Issue,
  type OpenPrInput,
  type ParsedWebhook,
  type Permission,
  type PullRequest,
  type RepoName,
  type Review,
  type ReviewComment,
  type WebTarget,
} from '@bb/forge';

/** The variable naming a Lab server's root, e.g. `https://lab.example.com`. */
export const LAB_URL = 'FORGE_LAB_URL';

const CODES: Record<number, BbErrorCode> = {
  400: 'INVALID_INPUT',
  401: 'UNAUTHORIZED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
};

async function call<T>(url: string, token: string | undefined, body?: unknown): Promise<T> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: body === undefined ? 'GET' : 'POST',
      headers: {
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(15_000),
    });
  } catch (err) {
    throw new BbError(
      'FORGE_UNAVAILABLE',
      `Lab at ${new URL(url).origin} cannot be reached: ${(err as Error).message}`,
    );
  }
  const text = await res.text();
  const parsed = text ? (JSON.parse(text) as { result?: T; error?: { message: string } }) : {};
  if (!res.ok)
    throw new BbError(
      CODES[res.status] ?? (res.status >= 500 ? 'FORGE_UNAVAILABLE' : 'FORGE_ERROR'),
      `Lab answered ${res.status}: ${parsed.error?.message ?? text.slice(0, 200)}`,
    );
  return parsed.result as T;
}

/** `Forge` for one Lab repository, acting as the token's user. */
export class LabForge extends Forge {
  readonly kind = 'lab';

  constructor(
    readonly root: string,
    readonly owner: string,
    readonly repo: string,
    readonly token: string | undefined,
  ) {
    super();
  }

  #rpc<T>(method: string, ...args: unknown[]): Promise<T> {
    return call<T>(
      `${this.root}/api/${encodeURIComponent(this.owner)}/${encodeURIComponent(this.repo)}/${method}`,
      this.token,
      { args },
    );
  }

  readIssue(n: number): Promise<Issue> {
    return this.#rpc('readIssue', n);
  }
  readPr(n: number): Promise<PullRequest> {
    return this.#rpc('readPr', n);
  }
  readComments(n: number): Promise<Comment[]> {
    return this.#rpc('readComments', n);
  }
  listOpenIssues(): Promise<Issue[]> {
    return this.#rpc('listOpenIssues');
  }
  postComment(n: number, body: string): Promise<Comment> {
    return this.#rpc('postComment', n, body);
  }
  updateDescription(n: number, body: string): Promise<void> {
    return this.#rpc('updateDescription', n, body);
  }
  openPr(input: OpenPrInput): Promise<PullRequest> {
    return this.#rpc('openPr', input);
  }
  isOrgMember(org: string, user: string): Promise<boolean> {
    return this.#rpc('isOrgMember', org, user);
  }
  getPrForIssue(n: number): Promise<number | undefined> {
    return this.#rpc<number | null>('getPrForIssue', n).then((v) => v ?? undefined);
  }
  readReviews(n: number): Promise<Review[]> {
    return this.#rpc('readReviews', n);
  }
  readReviewComments(n: number, reviewId: number): Promise<ReviewComment[]> {
    return this.#rpc('readReviewComments', n, reviewId);
  }
  permissionOf(user: string): Promise<Permission> {
    return this.#rpc('permissionOf', user);
  }
  override findPrs(query: {
    head: string;
    base: string;
    state?: 'open' | 'all';
  }): Promise<PullRequest[]> {
    return this.#rpc('findPrs', query);
  }
  override openIssue(input: { title: string; body: string }): Promise<Issue> {
    return this.#rpc('openIssue', input);
  }
  override closeIssue(n: number): Promise<void> {
    return this.#rpc('closeIssue', n);
  }
  override whoami(): Promise<string> {
    return this.#rpc('whoami');
  }
  override gitRemote(): GitRemote {
    return {
      url: `${this.root}/git/${encodeURIComponent(this.owner)}/${encodeURIComponent(this.repo)}.git`,
      headers: this.token ? { Authorization: `Bearer ${this.token}` } : {},
    };
  }
}

class LabSite implements ForgeSite {
  readonly kind = 'lab';
  constructor(readonly location: string) {}
  env() {
    return { [LAB_URL]: this.location };
  }
  forgeFor(t: RepoName & { token?: string | undefined }): LabForge {
    return new LabForge(this.location, t.owner, t.repo, t.token);
  }
  async whoami(token: string): Promise<string> {
    return (await call<{ login: string }>(`${this.location}/api/me`, token)).login;
  }
  async repositories(_token: string, named: readonly RepoName[]): Promise<RepoName[]> {
    return named.filter((r) => r.repo !== '*');
  }
  cloneUrl(t: RepoName): string {
    return this.forgeFor(t).gitRemote().url;
  }
  webUrl(t: WebTarget): string {
    const repo = `${this.location}/${t.owner}/${t.repo}`;
    return 'issue' in t
      ? `${repo}/-/issues/${t.issue}`
      : 'pr' in t
        ? `${repo}/-/changes/${t.pr}`
        : repo;
  }
}

/** What Lab posts: its own payload, one type per change. */
interface LabPayload {
  type: 'issue.opened' | 'issue.comment' | 'change.opened' | 'change.closed' | 'ping';
  id: string;
  repo: string;
  actor: { id: number; login: string };
  at: string;
  issue?: { number: number; title: string; labels: string[]; assignees: string[]; open: boolean };
  change?: {
    number: number;
    title: string;
    body: string;
    open: boolean;
    merged: boolean;
    from: string;
    fromSha: string;
    into: string;
    author: string;
  };
  comment?: { id: number; body: string; on: number; isChange: boolean };
}

const SIG = 'x-lab-signature';

function parse(
  headers: Parameters<ForgeKind['webhook']['parse']>[0],
  raw: Uint8Array | string,
): ParsedWebhook {
  const deliveryId = header(headers, 'x-lab-delivery');
  let p: LabPayload;
  try {
    p = JSON.parse(typeof raw === 'string' ? raw : Buffer.from(raw).toString('utf8')) as LabPayload;
  } catch (err) {
    throw new BbError('INVALID_INPUT', `Lab delivery is not JSON: ${(err as Error).message}`);
  }
  if (typeof p !== 'object' || !p || typeof p.type !== 'string' || typeof p.repo !== 'string')
    throw new BbError('INVALID_INPUT', 'Lab delivery has no type or repo');
  const [owner, repo] = p.repo.split('/') as [string, string];
  const base = { deliveryId, owner, repo, sender: p.actor, occurredAt: p.at };
  const key = `lab:${p.repo}:${p.type}:${p.id}`;
  const change = p.change
    ? {
        number: p.change.number,
        title: p.change.title,
        body: p.change.body,
        state: p.change.open ? ('open' as const) : ('closed' as const),
        head: p.change.from,
        headSha: p.change.fromSha,
        base: p.change.into,
        author: p.change.author,
      }
    : undefined;
  switch (p.type) {
    case 'issue.opened':
      if (!p.issue) throw new BbError('INVALID_INPUT', 'issue.opened without its issue');
      return {
        ...base,
        key,
        kind: 'issue_targeting_changed',
        action: 'opened',
        issue: {
          number: p.issue.number,
          title: p.issue.title,
          labels: p.issue.labels,
          assignees: p.issue.assignees,
          state: p.issue.open ? 'open' : 'closed',
        },
      };
    case 'issue.comment':
      if (!p.comment) throw new BbError('INVALID_INPUT', 'issue.comment without its comment');
      return {
        ...base,
        key: commentCreatedKey('lab', owner, repo, p.comment.id),
        kind: 'comment_created',
        on: p.comment.isChange ? 'pr' : 'issue',
        number: p.comment.on,
        comment: { id: p.comment.id, author: p.actor.login, body: p.comment.body },
      };
    case 'change.opened':
      if (!change) throw new BbError('INVALID_INPUT', 'change.opened without its change');
      return { ...base, key, kind: 'pr_opened', pr: change };
    case 'change.closed':
      if (!change) throw new BbError('INVALID_INPUT', 'change.closed without its change');
      return {
        ...base,
        key,
        kind: 'pr_closed',
        pr: change,
        merged: p.change!.merged,
        mergeCommitSha: null,
      };
    default:
      return { kind: 'ignored', reason: `Lab ${p.type} is not acted on`, deliveryId };
  }
}

/** Sign a Lab delivery: `sha256=<hex HMAC-SHA256 of the body>`. */
export function labSignature(secret: string, body: string | Uint8Array): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/** The Lab kind; `sidecarModule` is its bundle, for bottles' sidecars. */
export function labKind(sidecarModule?: string): ForgeKind {
  return {
    name: 'lab',
    summary: 'Lab; FORGE_LAB_URL is its root, e.g. https://lab.example.com',
    fromEnv(env) {
      const url = env[LAB_URL];
      if (!url || !/^https?:\/\/[^/]+/.test(url))
        throw new BbError('INVALID_INPUT', `${LAB_URL} is required: the Lab server's root URL`);
      return new LabSite(url.replace(/\/$/, ''));
    },
    webhook: {
      path: '/webhooks/lab',
      deliveryId: (headers) => header(headers, 'x-lab-delivery'),
      verify(headers, raw, secrets) {
        const given = header(headers, SIG) ?? '';
        let ok = false;
        for (const s of secrets) {
          if (!s) continue;
          const want = Buffer.from(labSignature(s, raw));
          const got = Buffer.from(given);
          if (want.length === got.length && timingSafeEqual(want, got)) ok = true;
        }
        return ok;
      },
      parse,
    },
    ...defaultBottleBranches,
    ...(sidecarModule ? { sidecarModule } : {}),
  };
}
