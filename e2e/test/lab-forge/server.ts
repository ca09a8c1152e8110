// The Lab test double: Lab's REST API over a MemoryForgeWorld (@bb/forge/testing), its
// repositories served by the real `git http-backend` behind Bearer tokens, and signed
// Lab-shaped webhooks for what people do. Loopback only; every call is recorded.
import { execFile, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { isBbError } from '@bb/errors';
import type { PullRequest } from '@bb/forge';
import { MemoryForge, MemoryForgeWorld } from '@bb/forge/testing';
import { labSignature } from './kind';

const run = promisify(execFile);
const GIT_ENV = {
  PATH: process.env['PATH'] ?? '',
  HOME: tmpdir(),
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_AUTHOR_NAME: 'lab',
  GIT_AUTHOR_EMAIL: 'lab@lab.test',
  GIT_COMMITTER_NAME: 'lab',
  GIT_COMMITTER_EMAIL: 'lab@lab.test',
};

/** What the API lets a caller run, by name (MemoryForge's methods). */
const METHODS = new Set([
  'readIssue',
  'readPr',
  'readComments',
  'listOpenIssues',
  'postComment',
  'updateDescription',
  'openPr',
  'isOrgMember',
  'getPrForIssue',
  'readReviews',
  'readReviewComments',
  'permissionOf',
  'findPrs',
  'openIssue',
  'closeIssue',
  'whoami',
]);

const STATUS: Record<string, number> = {
  INVALID_INPUT: 400,
  UNAUTHORIZED: 401,
  NOT_FOUND: 404,
  CONFLICT: 409,
};

export interface LabCall {
  method: string;
  path: string;
  user: string | null;
  status: number;
}

export class LabServer {
  readonly world = new MemoryForgeWorld();
  readonly calls: LabCall[] = [];
  readonly hooks: Array<{ url: string; secret: string }> = [];
  readonly deliveries: Array<{ type: string; status: number }> = [];
  readonly #tokens = new Map<string, string>();
  readonly #dir = mkdtempSync(join(tmpdir(), 'bb-lab-'));
  #server!: Server;
  url = '';

  static async start(): Promise<LabServer> {
    const s = new LabServer();
    s.#server = createServer((req, res) => {
      s.#handle(req, res).catch((err) => {
        res.writeHead(500).end(String(err));
      });
    });
    await new Promise<void>((r) => s.#server.listen(0, '127.0.0.1', r));
    s.url = `http://127.0.0.1:${(s.#server.address() as AddressInfo).port}`;
    return s;
  }

  addUser(login: string, token?: string): void {
    this.world.user(login);
    if (token) this.#tokens.set(token, login);
  }

  /** A repository with one commit on `main`, `owner` its admin. */
  async addRepo(owner: string, repo: string, files: Record<string, string>): Promise<void> {
    const bare = this.#gitDir(owner, repo);
    mkdirSync(bare, { recursive: true });
    await run('git', ['init', '-q', '--bare', '-b', 'main', bare], { env: GIT_ENV });
    const work = mkdtempSync(join(tmpdir(), 'bb-lab-seed-'));
    try {
      await run('git', ['init', '-q', '-b', 'main', work], { env: GIT_ENV });
      for (const [f, text] of Object.entries(files)) writeFileSync(join(work, f), text);
      await run('git', ['-C', work, 'add', '-A'], { env: GIT_ENV });
      await run('git', ['-C', work, 'commit', '-q', '-m', 'seed'], { env: GIT_ENV });
      await run('git', ['-C', work, 'push', '-q', bare, 'main'], { env: GIT_ENV });
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
    this.world.grant(owner, repo, owner, 'admin');
    await this.#syncBranches(owner, repo);
  }

  /** A person opens an issue (Lab sends `issue.opened`). */
  async openIssue(
    author: string,
    owner: string,
    repo: string,
    input: { title: string; body?: string; labels?: string[]; assignees?: string[] },
  ): Promise<number> {
    const n = this.world.addIssue(owner, repo, { ...input, author });
    const issue = await this.#as(author, owner, repo).readIssue(n);
    await this.#emit(owner, repo, author, 'issue.opened', {
      issue: {
        number: n,
        title: issue.title,
        labels: issue.labels.map((l) => l.name),
        assignees: issue.assignees.map((a) => a.login),
        open: true,
      },
    });
    return n;
  }

  /** A person comments on an issue or change (Lab sends `issue.comment`). */
  async comment(author: string, owner: string, repo: string, n: number, body: string) {
    const forge = this.#as(author, owner, repo);
    const isChange = (await forge.readIssue(n)).isPullRequest;
    const c = await forge.postComment(n, body);
    await this.#emit(owner, repo, author, 'issue.comment', {
      comment: { id: c.id, body, on: n, isChange },
    });
    return c;
  }

  /** A person closes a change without merging it (Lab sends `change.closed`). */
  async closeChange(author: string, owner: string, repo: string, n: number): Promise<void> {
    const item = this.world.repo(owner, repo).items.get(n);
    if (!item?.pr) throw new Error(`no change ${n}`);
    const at = this.world.tick();
    item.pr = { ...item.pr, state: 'closed', closedAt: at, updatedAt: at };
    item.issue = { ...item.issue, state: 'closed', closedAt: at, updatedAt: at };
    await this.#emit(owner, repo, author, 'change.closed', { change: change(item.pr) });
  }

  /** A delivery of `type` as Lab would sign it with `secret` (a webhook fixture), not sent. */
  signed(owner: string, repo: string, actor: string, type: string, extra: object, secret: string) {
    const body = JSON.stringify({
      type,
      id: randomUUID(),
      repo: `${owner}/${repo}`,
      actor: this.world.user(actor),
      at: this.world.tick(),
      ...extra,
    });
    return {
      headers: {
        'content-type': 'application/json',
        'x-lab-delivery': randomUUID(),
        'x-lab-signature': labSignature(secret, body),
      },
      body,
    };
  }

  close(): Promise<void> {
    return new Promise((r) => {
      this.#server.close(() => {
        rmSync(this.#dir, { recursive: true, force: true });
        r();
      });
      this.#server.closeAllConnections();
    });
  }

  #as(login: string, owner: string, repo: string): MemoryForge {
    return new MemoryForge({ owner, repo, as: login, world: this.world });
  }

  #gitDir(owner: string, repo: string): string {
    return join(this.#dir, owner, `${repo}.git`);
  }

  /** The world's branches as the repository's refs are (after a push). */
  async #syncBranches(owner: string, repo: string): Promise<void> {
    const { stdout } = await run(
      'git',
      [
        '--git-dir',
        this.#gitDir(owner, repo),
        'for-each-ref',
        '--format=%(refname:short) %(objectname)',
        'refs/heads',
      ],
      { env: GIT_ENV },
    );
    for (const line of stdout.split('\n').filter(Boolean)) {
      const [branch, sha] = line.split(' ') as [string, string];
      this.world.pushBranch(owner, repo, branch, sha);
    }
  }

  async #emit(owner: string, repo: string, actor: string, type: string, extra: object) {
    for (const h of this.hooks) {
      const { headers, body } = this.signed(owner, repo, actor, type, extra, h.secret);
      const res = await fetch(h.url, { method: 'POST', headers, body }).catch(() => undefined);
      await res?.text();
      this.deliveries.push({ type, status: res?.status ?? 0 });
    }
  }

  #user(req: IncomingMessage): string | null {
    const m = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '');
    return m ? (this.#tokens.get(m[1]!) ?? null) : null;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const user = this.#user(req);
    const send = (status: number, body: unknown) => {
      this.calls.push({ method: req.method ?? '', path: url.pathname, user, status });
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    const git = /^\/git\/([^/]+)\/([^/]+)\.git(\/.*)$/.exec(url.pathname);
    if (git) return this.#git(req, res, url, git[1]!, git[2]!, git[3]!, user);
    if (!user) return send(401, { error: { message: 'a Bearer token is required' } });
    if (url.pathname === '/api/me') return send(200, { result: { login: user } });
    const api = /^\/api\/([^/]+)\/([^/]+)\/([A-Za-z]+)$/.exec(url.pathname);
    if (!api || req.method !== 'POST' || !METHODS.has(api[3]!))
      return send(404, { error: { message: `no route ${req.method} ${url.pathname}` } });
    const [owner, repo, method] = [api[1]!, api[2]!, api[3]!];
    let text = '';
    for await (const chunk of req) text += chunk;
    const { args } = JSON.parse(text || '{"args":[]}') as { args: unknown[] };
    const forge = this.#as(user, owner, repo);
    if (['openPr', 'postComment', 'updateDescription', 'closeIssue'].includes(method)) {
      const perm = await forge.permissionOf(user);
      if (perm !== 'write' && perm !== 'admin')
        return send(403, { error: { message: `${user} may not write to ${owner}/${repo}` } });
    }
    try {
      if (method === 'openPr') await this.#syncBranches(owner, repo);
      const result = await (
        forge as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>
      )[method]!(...args);
      send(200, { result: result ?? null });
      if (method === 'openPr')
        await this.#emit(owner, repo, user, 'change.opened', {
          change: change(result as PullRequest),
        });
    } catch (err) {
      const code = isBbError(err) ? err.code : 'INTERNAL';
      send(STATUS[code] ?? 500, { error: { message: (err as Error).message } });
    }
  }

  async #git(
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
    owner: string,
    repo: string,
    rest: string,
    user: string | null,
  ): Promise<void> {
    const push =
      rest === '/git-receive-pack' || url.searchParams.get('service') === 'git-receive-pack';
    const perm = user ? await this.#as(user, owner, repo).permissionOf(user) : 'none';
    const record = (status: number) =>
      this.calls.push({ method: req.method ?? '', path: url.pathname, user, status });
    // Private repositories: nothing without a token, and no push without write access.
    if (!user || (push && perm !== 'write' && perm !== 'admin')) {
      record(user ? 403 : 401);
      res.writeHead(user ? 403 : 401, { 'www-authenticate': 'Bearer realm="lab"' }).end();
      return;
    }
    record(200);
    await new Promise<void>((resolve) => {
      const child = spawn('git', ['http-backend'], {
        env: {
          ...GIT_ENV,
          GIT_PROJECT_ROOT: this.#dir,
          GIT_HTTP_EXPORT_ALL: '1',
          PATH_INFO: `/${owner}/${repo}.git${rest}`,
          QUERY_STRING: url.search.slice(1),
          REQUEST_METHOD: req.method ?? 'GET',
          CONTENT_TYPE: req.headers['content-type'] ?? '',
          ...(req.headers['content-encoding']
            ? { HTTP_CONTENT_ENCODING: String(req.headers['content-encoding']) }
            : {}),
          ...(req.headers['git-protocol']
            ? { GIT_PROTOCOL: String(req.headers['git-protocol']) }
            : {}),
          REMOTE_USER: user,
          REMOTE_ADDR: '127.0.0.1',
        },
      });
      req.pipe(child.stdin);
      let head = Buffer.alloc(0);
      let body = false;
      child.stdout.on('data', (chunk: Buffer) => {
        if (body) return void res.write(chunk);
        head = Buffer.concat([head, chunk]);
        // CGI headers end with an empty line (CRLF or LF).
        const crlf = head.indexOf('\r\n\r\n');
        const end = crlf !== -1 ? crlf : head.indexOf('\n\n');
        if (end === -1) return;
        const gap = crlf !== -1 ? 4 : 2;
        for (const line of head.subarray(0, end).toString('latin1').split(/\r?\n/)) {
          const [k, ...v] = line.split(':');
          if (k?.toLowerCase() === 'status') res.statusCode = Number.parseInt(v.join(':'), 10);
          else if (k) res.setHeader(k, v.join(':').trim());
        }
        body = true;
        res.write(head.subarray(end + gap));
      });
      child.stderr.resume();
      child.on('close', () => {
        res.end();
        resolve();
      });
    });
    if (push) await this.#syncBranches(owner, repo);
  }
}

function change(pr: PullRequest) {
  return {
    number: pr.number,
    title: pr.title,
    body: pr.body,
    open: pr.state === 'open',
    merged: pr.merged,
    from: pr.head.ref,
    fromSha: pr.head.sha,
    into: pr.base.ref,
    author: pr.author.login,
  };
}
