import { execFile, spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** Environment for every git the server runs: no user or system config. */
function gitEnv(home: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env['PATH'],
    HOME: home,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_AUTHOR_NAME: 'Gitea',
    GIT_AUTHOR_EMAIL: 'gitea@noreply.test',
    GIT_COMMITTER_NAME: 'Gitea',
    GIT_COMMITTER_EMAIL: 'gitea@noreply.test',
    ...extra,
  };
}

export class GitStore {
  constructor(readonly root: string) {
    mkdirSync(root, { recursive: true });
  }

  dirOf(owner: string, name: string): string {
    return join(this.root, owner, `${name}.git`);
  }

  async git(dir: string, args: string[], input?: string): Promise<string> {
    if (input === undefined) {
      const { stdout } = await run('git', args, {
        cwd: dir,
        env: gitEnv(this.root),
        maxBuffer: 64 * 1024 * 1024,
      });
      return stdout;
    }
    return new Promise((resolve, reject) => {
      const child = spawn('git', args, { cwd: dir, env: gitEnv(this.root) });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (err += d));
      child.on('error', reject);
      child.on('close', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`git ${args.join(' ')}: ${err}`)),
      );
      child.stdin.end(input);
    });
  }

  /** A bare repository whose default branch holds one commit with `files`. */
  async create(
    owner: string,
    name: string,
    defaultBranch: string,
    files: Record<string, string>,
  ): Promise<string> {
    const dir = this.dirOf(owner, name);
    mkdirSync(dir, { recursive: true });
    await this.git(dir, ['init', '--quiet', '--bare', `--initial-branch=${defaultBranch}`]);
    await this.git(dir, ['config', 'http.receivepack', 'true']);
    await this.git(dir, ['config', 'receive.denyNonFastForwards', 'false']);
    const entries: string[] = [];
    for (const [path, content] of Object.entries(files)) {
      if (path.includes('/')) throw new Error(`seed files must be at the top level: ${path}`);
      const sha = (await this.git(dir, ['hash-object', '-w', '--stdin'], content)).trim();
      entries.push(`100644 blob ${sha}\t${path}`);
    }
    const tree = (await this.git(dir, ['mktree'], `${entries.join('\n')}\n`)).trim();
    const commit = (await this.git(dir, ['commit-tree', tree, '-m', 'Initial commit'])).trim();
    await this.git(dir, ['update-ref', `refs/heads/${defaultBranch}`, commit]);
    return dir;
  }

  /** The sha of a branch, or undefined. */
  async branchSha(dir: string, branch: string): Promise<string | undefined> {
    try {
      return (
        (
          await this.git(dir, ['rev-parse', '--verify', '--quiet', `refs/heads/${branch}^{commit}`])
        ).trim() || undefined
      );
    } catch {
      return undefined;
    }
  }

  async branches(dir: string): Promise<Map<string, string>> {
    const out = await this.git(dir, [
      'for-each-ref',
      '--format=%(refname:short) %(objectname)',
      'refs/heads',
    ]);
    const map = new Map<string, string>();
    for (const line of out.split('\n')) {
      const [ref, sha] = line.split(' ');
      if (ref && sha) map.set(ref, sha);
    }
    return map;
  }

  async mergeBase(dir: string, a: string, b: string): Promise<string> {
    try {
      return (await this.git(dir, ['merge-base', a, b])).trim();
    } catch {
      return '';
    }
  }

  /**
   * Merge `head` into `base` with a merge commit (or, `squash`, one commit with
   * the merged tree and `base` as its only parent), in the bare repository.
   * Returns the new commit, or undefined when the two conflict.
   */
  async merge(
    dir: string,
    base: string,
    head: string,
    message: string,
    author: { name: string; email: string },
    style: 'merge' | 'squash' = 'merge',
  ): Promise<string | undefined> {
    let tree: string;
    try {
      tree = (
        await this.git(dir, [
          'merge-tree',
          '--write-tree',
          `refs/heads/${base}`,
          `refs/heads/${head}`,
        ])
      )
        .split('\n')[0]!
        .trim();
    } catch {
      return undefined;
    }
    const baseSha = (await this.git(dir, ['rev-parse', `refs/heads/${base}`])).trim();
    const headSha = (await this.git(dir, ['rev-parse', `refs/heads/${head}`])).trim();
    const { stdout } = await run(
      'git',
      [
        'commit-tree',
        tree,
        '-p',
        baseSha,
        ...(style === 'squash' ? [] : ['-p', headSha]),
        '-m',
        message,
      ],
      {
        cwd: dir,
        env: gitEnv(this.root, {
          GIT_AUTHOR_NAME: author.name,
          GIT_AUTHOR_EMAIL: author.email,
          GIT_COMMITTER_NAME: author.name,
          GIT_COMMITTER_EMAIL: author.email,
        }),
      },
    );
    const commit = stdout.trim();
    await this.git(dir, ['update-ref', `refs/heads/${base}`, commit, baseSha]);
    return commit;
  }

  /**
   * Serve git's smart HTTP protocol for `/owner/name.git/...` through the real
   * `git http-backend` CGI program.
   */
  serveHttp(
    req: IncomingMessage,
    res: ServerResponse,
    pathInfo: string,
    query: string,
    remoteUser: string | undefined,
  ): Promise<void> {
    return new Promise((resolve) => {
      const env = gitEnv(this.root, {
        GIT_PROJECT_ROOT: this.root,
        GIT_HTTP_EXPORT_ALL: '1',
        PATH_INFO: pathInfo,
        QUERY_STRING: query,
        REQUEST_METHOD: req.method ?? 'GET',
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        ...(req.headers['content-length'] ? { CONTENT_LENGTH: req.headers['content-length'] } : {}),
        ...(req.headers['content-encoding']
          ? { HTTP_CONTENT_ENCODING: String(req.headers['content-encoding']) }
          : {}),
        ...(req.headers['git-protocol']
          ? { GIT_PROTOCOL: String(req.headers['git-protocol']) }
          : {}),
        REMOTE_USER: remoteUser ?? '',
        REMOTE_ADDR: req.socket.remoteAddress ?? '127.0.0.1',
      });
      const child = spawn('git', ['http-backend'], { env });
      req.pipe(child.stdin);
      let head = Buffer.alloc(0);
      let headersDone = false;
      child.stdout.on('data', (chunk: Buffer) => {
        if (headersDone) {
          res.write(chunk);
          return;
        }
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf('\r\n\r\n');
        const endLf = end === -1 ? head.indexOf('\n\n') : -1;
        if (end === -1 && endLf === -1) return;
        const cut = end !== -1 ? end : endLf;
        const sep = end !== -1 ? 4 : 2;
        let status = 200;
        for (const line of head.subarray(0, cut).toString('latin1').split(/\r?\n/)) {
          const i = line.indexOf(':');
          if (i === -1) continue;
          const k = line.slice(0, i).trim();
          const v = line.slice(i + 1).trim();
          if (k.toLowerCase() === 'status') status = Number.parseInt(v, 10) || 200;
          else res.setHeader(k, v);
        }
        res.statusCode = status;
        headersDone = true;
        res.write(head.subarray(cut + sep));
      });
      child.stderr.resume();
      child.on('close', () => {
        if (!headersDone) {
          res.statusCode = 500;
        }
        res.end();
        resolve();
      });
      child.on('error', () => {
        res.statusCode = 500;
        res.end();
        resolve();
      });
    });
  }
}
