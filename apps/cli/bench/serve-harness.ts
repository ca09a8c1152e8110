// What the benchmarks that run the service as an operator does share: the
// Gitea-compatible test server delivering signed webhooks to `bb orchestrate serve`
// (the real binary), script agents in real bottles, and the timing of an issue's
// webhook to its agent's first forge call (its entry in the bottle's op log).
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/testing';
import {
  type BottleMeta,
  DockerBackend,
  HOME_LABEL,
  homeLabel,
  unmountAllUnder,
} from '@bb/headless';
import { makeTestHome, prSteps, scriptAgent } from '@bb/headless/testing';
import { BASE_IMAGE } from '@bb/tooling/docker';
import { freePort } from '@bb/tooling/net';

const BB = fileURLToPath(new URL('../dist/bin.js', import.meta.url));
export const TOKEN = 'bench-token-0123456789';
const SECRET = 'bench-webhook-secret';

/**
 * The benchmarks' agent: its first turn reads its issue (its first forge call), opens
 * a PR and signals done; each later turn reads the issue and signals done.
 */
export const prAgent = () =>
  scriptAgent(
    [
      {
        steps: [
          { do: 'read_issue' },
          ...prSteps({
            path: 'bench.txt',
            content: 'turn {{turn}}\n',
            message: 'bench',
            title: 'Bench',
            body: 'bench',
          }),
          { do: 'done', status: 'success', summary: 'ok' },
        ],
      },
      { steps: [{ do: 'read_issue' }, { do: 'done', status: 'success', summary: 'ok' }] },
    ],
    { name: 'B' },
  );

/** The times of an op log's entries (ms since the epoch), in order; none when it is not there. */
export const opTimesIn = (file: string) =>
  existsSync(file)
    ? readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => Date.parse((JSON.parse(l) as { time: string }).time))
    : [];

/** Poll `f` every 5 ms until it gives a value; fail naming `what` after `ms`. */
export async function until<T>(what: string, f: () => T | undefined, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export interface ServeBenchOptions {
  /** The home's prefix in the temporary directory. */
  prefix: string;
  /** Agent manifests by name (`scriptAgent`): an issue labelled `bot-bottle:<name>` launches one. */
  agents: Record<string, Record<string, unknown>>;
  /** Repositories of `acme` besides `widgets`, with their files. */
  repos?: Record<string, Record<string, string>>;
  /** More of the service's environment (BB_WARM_WINDOW, BB_MAX_BOTTLES, ...). */
  serviceEnv?: Record<string, string>;
}

export interface ServeBench {
  server: GiteaTestServer;
  home: string;
  env: Record<string, string>;
  backend: DockerBackend;
  /** Run a command with the bench's environment; its stdout, or a rejection with its stderr. */
  run(cmd: string, args: string[]): Promise<string>;
  /** The bottle the service made for an issue, from its meta. */
  bottleOf(repo: string, issue: number): { slug: string; meta: BottleMeta } | undefined;
  meta(slug: string): BottleMeta | undefined;
  /** A bottle's op-log times. */
  ops(slug: string): number[];
  /** File an issue for `agent` (assigned to the bot); when its webhook went. */
  file(repo: string, title: string, agent: string): { issue: number; at: number };
  /** Issue webhook -> the agent's first forge call, without waiting for its turn to end. */
  firstCall(repo: string, title: string, agent: string): Promise<{ ms: number; slug: string }>;
  /** Wait until the bottle is frozen after `turns` turns, in its meta and in the service's word. */
  untilFrozen(slug: string, turns: number): Promise<void>;
  /** The service's stderr, its last 20,000 characters. */
  log(): string;
  /** Say why the bench failed, with the tail of the service's log, and fail the process. */
  failed(err: unknown): void;
  /** Stop the service, remove every container and disk mount of the bench's home, close the server, remove the home. */
  close(): Promise<void>;
}

/** Start the test server and `bb orchestrate serve` on it, hooked to its webhooks. */
export async function startServeBench(o: ServeBenchOptions): Promise<ServeBench> {
  const server = await createGiteaTestServer({
    world: {
      users: [{ login: 'alice' }, { login: 'bot', tokens: [TOKEN] }],
      orgs: [
        { name: 'acme', members: ['alice'] },
        { name: 'bot-bottle', members: ['bot'] },
      ],
      repos: [
        { owner: 'acme', name: 'widgets', collaborators: ['bot'], admins: ['bot'] },
        ...Object.entries(o.repos ?? {}).map(([name, files]) => ({
          owner: 'acme',
          name,
          collaborators: ['bot'],
          admins: ['bot'],
          files,
        })),
      ],
    },
  });
  const home = makeTestHome(o.prefix, { agents: o.agents, image: BASE_IMAGE });
  const env = { BB_HOME: home, BB_BASE_IMAGE: BASE_IMAGE };
  const backend = new DockerBackend();

  const run = (cmd: string, args: string[]) =>
    new Promise<string>((resolve, reject) => {
      const child = spawn(cmd, args, {
        env: { ...process.env, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d) => {
        out += d;
      });
      child.stderr.on('data', (d) => {
        err += d;
      });
      child.once('exit', (code) =>
        code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(' ')}: ${code} ${err}`)),
      );
    });
  const meta = (slug: string): BottleMeta | undefined => {
    try {
      return JSON.parse(
        readFileSync(join(home, 'bottles', slug, 'meta.json'), 'utf8'),
      ) as BottleMeta;
    } catch {
      return undefined;
    }
  };
  const bottleOf = (repo: string, issue: number) => {
    const dir = join(home, 'bottles');
    if (!existsSync(dir)) return undefined;
    for (const slug of readdirSync(dir)) {
      const m = meta(slug);
      if (m?.forge?.repo === repo && m.forge.issue === issue) return { slug, meta: m };
    }
    return undefined;
  };
  const ops = (slug: string) => opTimesIn(join(home, 'bottles', slug, 'state', 'ops.jsonl'));

  // The service, as an operator runs it.
  const port = await freePort();
  const service = spawn(process.execPath, [BB, 'orchestrate', 'serve'], {
    env: {
      ...process.env,
      ...env,
      FORGE_GITEA_API: server.apiUrl,
      FORGE_TOKEN: TOKEN,
      FORGE_WEBHOOK_SECRET: SECRET,
      BB_PORT: String(port),
      BB_SWEEP_INTERVAL: '0',
      BB_DONE_GRACE: '2s',
      ...o.serviceEnv,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let serviceLog = '';
  const tee = process.env['BB_BENCH_SERVICE_LOG'];
  service.stdout.on('data', (d) => {
    if (tee) appendFileSync(tee, d);
  });
  service.stderr.on('data', (d) => {
    serviceLog = (serviceLog + d).slice(-20_000);
    if (tee) appendFileSync(tee, d);
  });
  process.on('exit', () => service.kill('SIGKILL'));
  for (let i = 0; ; i++) {
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    if (i > 400 || service.exitCode !== null)
      throw new Error(`bb orchestrate serve did not start:\n${serviceLog}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  server.addHook({ url: `http://127.0.0.1:${port}/webhooks/gitea`, secret: SECRET });

  /** The service's own word on a bottle (its turn recorded and the row saved). */
  async function serviceStatus(slug: string): Promise<string | undefined> {
    const r = await fetch(`http://127.0.0.1:${port}/api/bottles`);
    const { bottles } = (await r.json()) as { bottles: Array<{ slug: string; status: string }> };
    return bottles.find((b) => b.slug === slug)?.status;
  }
  const file = (repo: string, title: string, agent: string) => {
    const at = Date.now();
    const issue = server.createIssue('alice', `acme/${repo}`, {
      title,
      labels: [`bot-bottle:${agent}`],
      assignees: ['bot'],
    });
    return { issue, at };
  };
  return {
    server,
    home,
    env,
    backend,
    run,
    bottleOf,
    meta,
    ops,
    file,
    async firstCall(repo, title, agent) {
      const { issue, at } = file(repo, title, agent);
      const { slug } = await until('the bottle to be made', () => bottleOf(repo, issue));
      const first = await until('its first forge call', () => ops(slug)[0]);
      // Beside the service's own log, for reading a round's timeline against it.
      if (tee)
        appendFileSync(
          tee,
          `${JSON.stringify({ msg: 'bench launch', slug, webhookAt: at, firstCallAt: first })}\n`,
        );
      return { ms: first - at, slug };
    },
    async untilFrozen(slug, turns) {
      const deadline = Date.now() + 120_000;
      for (;;) {
        const m = meta(slug);
        if (
          m?.status === 'frozen' &&
          m.turns.length === turns &&
          (await serviceStatus(slug)) === 'frozen'
        )
          return;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${slug} to be frozen`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    log: () => serviceLog,
    failed(err) {
      console.error(
        `${(err as Error).message}\n--- service log (tail) ---\n${serviceLog.slice(-4000)}`,
      );
      process.exitCode = 1;
    },
    async close() {
      service.kill('SIGTERM');
      if (service.exitCode === null) await new Promise((r) => service.once('exit', r));
      for (const c of await backend.list({ [HOME_LABEL]: homeLabel(env) }))
        await backend.destroy(c.id);
      // Bottles still running when the bench ends have their disks mounted.
      await unmountAllUnder(home);
      await server.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}
