// An upstream and its fork on the Gitea-compatible test server, the operator's checkout,
// and `forklift` run on it as the CLI runs: shared by the forklift end-to-end tests.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { closeGiteaPools } from '@bb/forge';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import { type ForkliftIo, runForkliftCli } from '@bb/forklift';
import { DockerBackend } from '@bb/headless';

// Asynchronous: the test server answers in this very process.
const run = promisify(execFile);
export const git = async (cwd: string, ...args: string[]) =>
  (
    await run('git', args, {
      cwd,
      encoding: 'utf8',
      env: {
        ...process.env,
        GIT_TERMINAL_PROMPT: '0',
        GIT_AUTHOR_NAME: 'T',
        GIT_AUTHOR_EMAIL: 't@x',
        GIT_COMMITTER_NAME: 'T',
        GIT_COMMITTER_EMAIL: 't@x',
      },
    })
  ).stdout.trim();

export type ForkliftResultJson = Record<string, unknown> & {
  runDir: string;
  pr?: { number: number };
};

export interface ForkWorld {
  gitea: GiteaTestServer;
  root: string;
  backend: DockerBackend;
  /** Commit `files` onto `main` of a repository on the test server (as its owner would). */
  commit(repo: string, files: Record<string, string>, message: string): Promise<void>;
  /** A fresh upstream and fork sharing their first commit, and the operator's checkout. */
  scenario(
    files?: Record<string, string>,
  ): Promise<{ up: string; fork: string; checkout: string; name: string }>;
  /** Run the forklift CLI in `checkout`; `args` after `--image IMAGE --json`. */
  forklift(
    checkout: string,
    args: string[],
    env?: Record<string, string>,
  ): Promise<{ code: number; result: ForkliftResultJson | undefined; err: string }>;
  /** Run forklift with the script agent and these steps. */
  scripted(
    checkout: string,
    steps: unknown[],
    extra?: string[],
  ): Promise<{ code: number; result: ForkliftResultJson | undefined; err: string }>;
  /** The fork's forklift/* branches on the server. */
  branches(name: string): Promise<string>;
  close(): Promise<void>;
}

export async function forkWorld(o: {
  token: string;
  image: string;
  repos?: number;
}): Promise<ForkWorld> {
  const root = mkdtempSync(join(tmpdir(), 'bb-forklift-'));
  const backend = new DockerBackend();
  const gitea = await createGiteaTestServer({
    world: {
      users: [{ login: 'alice' }, { login: 'bot', tokens: [o.token] }],
      orgs: [{ name: 'acme', members: ['alice'] }],
      repos: Array.from({ length: o.repos ?? 20 }, (_, i) => [
        { owner: 'acme', name: `widgets${i + 1}` },
        { owner: 'bot', name: `widgets${i + 1}` },
      ]).flat(),
    },
  });
  let n = 0;
  let scripts = 0;
  const w: ForkWorld = {
    gitea,
    root,
    backend,
    async commit(repo, files, message) {
      const dir = gitea.git.dirOf(...(repo.split('/') as [string, string]));
      const work = mkdtempSync(join(root, 'work-'));
      await git(root, 'clone', '--quiet', dir, work);
      for (const [f, c] of Object.entries(files)) {
        await run('mkdir', ['-p', join(work, f, '..')]);
        writeFileSync(join(work, f), c);
      }
      await git(work, 'add', '-A');
      await git(work, 'commit', '--quiet', '-m', message);
      await git(work, 'push', '--quiet', 'origin', 'HEAD:main');
      rmSync(work, { recursive: true, force: true });
    },
    async scenario(files = { 'a.txt': 'one\ntwo\nthree\n' }) {
      const name = `widgets${++n}`;
      const up = `acme/${name}`;
      const fork = `bot/${name}`;
      await w.commit(up, files, 'First commit');
      // The fork starts as a copy of upstream.
      await git(
        root,
        '--git-dir',
        gitea.git.dirOf('bot', name),
        'fetch',
        '--quiet',
        gitea.git.dirOf('acme', name),
        '+main:main',
      );
      const checkout = join(root, `checkout-${name}`);
      await git(root, 'clone', '--quiet', gitea.cloneUrl(fork), checkout);
      await git(checkout, 'remote', 'add', 'upstream', gitea.cloneUrl(up));
      return { up, fork, checkout, name };
    },
    async forklift(checkout, args, env = {}) {
      let out = '';
      let err = '';
      const io: ForkliftIo = {
        cwd: checkout,
        env: {
          ...process.env,
          FORKLIFT_TOKEN: o.token,
          FORKLIFT_API: gitea.apiUrl,
          XDG_STATE_HOME: join(root, 'state'),
          BB_HOME: join(root, 'bbhome'),
          ...env,
        },
        stdout: (s) => (out += s),
        stderr: (s) => (err += s),
      };
      const code = await runForkliftCli(['--image', o.image, '--json', ...args], io, backend);
      const result = out ? (JSON.parse(out) as ForkliftResultJson) : undefined;
      return { code, result, err };
    },
    scripted(checkout, steps, extra = []) {
      const script = join(root, `script-${++scripts}.json`);
      writeFileSync(script, JSON.stringify(steps));
      return w.forklift(checkout, ['--agent', 'script', '--script', script, ...extra]);
    },
    branches: (name) =>
      git(root, '--git-dir', gitea.git.dirOf('bot', name), 'branch', '--list', 'forklift/*'),
    async close() {
      await gitea.close();
      await closeGiteaPools();
      rmSync(root, { recursive: true, force: true });
    },
  };
  return w;
}
