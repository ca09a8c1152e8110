import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { QueueWriter } from '@bb/forge-sidecar';
import {
  type BottleInfo,
  type BottleMeta,
  type BottleRunner,
  type BottleStorage,
  bottlePaths,
  hostBottleStorage,
  readMeta,
  type TurnOutcome,
  writeMeta,
} from '@bb/headless';

/** One scripted failure of a runner step, for the next call only. */
type Step = 'launch' | 'resume' | 'finish';

interface Turn {
  exit: (code: number) => void;
  exited: Promise<number>;
}

/**
 * A bottle runner with no Docker: bottles are directories in a real BB_HOME
 * layout (meta, queue, turn log, op log, as the real runner leaves them), and
 * each agent is driven by the test: it opens PRs, signals done, checks in and
 * exits when told. Stopping an agent makes it exit at once.
 */
export class FakeRunner implements BottleRunner {
  takeResumeRequest?: BottleRunner['takeResumeRequest'];
  readonly backendName = 'fake';
  readonly env: Record<string, string | undefined>;
  readonly storage: BottleStorage;
  /** Everything asked of it, in order: `launch <slug>`, `resume <slug> <prompt>`, `stop <slug>`, `destroy <slug>`. */
  readonly calls: string[] = [];
  readonly #turns = new Map<string, Turn>();
  readonly #failNext = new Map<Step, Error>();
  readonly #gone = new Set<string>();
  /** Input tokens each bottle's current turn reports (as a CLI's usage would). */
  readonly #tokens = new Map<string, number>();
  /** Held starts (a start that takes as long as the test says). */
  readonly #hold = new Map<string, Promise<void>>();
  /** Memory each bottle is counted at. */
  bytes = 1024 ** 3;
  /** Keep bottles warm after their turns, this long, holding this much (as the real runner can). */
  warm: { ms: number; bytes: number } | undefined;
  /** Each agent started (a launch's or a resume's turn), by slug, in order. */
  readonly started: string[] = [];
  /** What each launch and resume was asked, in order. */
  readonly launches: Array<Parameters<BottleRunner['startLaunch']>[0]> = [];
  readonly resumes: Array<Parameters<BottleRunner['startResume']>[0]> = [];
  /** Each renewal of a gate's hold (`BottleRunner.hold`): until when, and when it was asked. */
  readonly holds: Array<{ slug: string; until: number; at: number }> = [];

  constructor(home: string) {
    this.env = { BB_HOME: home };
    this.storage = hostBottleStorage(this.env);
  }

  failNext(step: Step, err: Error = new BbError('BACKEND_ERROR', `${step} failed (scripted)`)) {
    this.#failNext.set(step, err);
  }

  /** Make the next start of a bottle (a launch or a resume) wait for `until`. */
  holdStart(until: Promise<void>) {
    this.#hold.set('next', until);
  }

  #take(step: Step): void {
    const err = this.#failNext.get(step);
    if (err) {
      this.#failNext.delete(step);
      throw err;
    }
  }

  async hold(slug: string, until: number): Promise<boolean> {
    this.holds.push({ slug, until, at: Date.now() });
    return true;
  }

  async startLaunch(o: Parameters<BottleRunner['startLaunch']>[0]): Promise<void> {
    this.calls.push(`launch ${o.slug}`);
    this.launches.push(o);
    const hold = this.#hold.get('next');
    this.#hold.delete('next');
    await hold;
    this.#take('launch');
    const p = bottlePaths(o.slug, this.env);
    mkdirSync(join(p.dir, 'state'), { recursive: true });
    const meta: BottleMeta = {
      slug: o.slug,
      agent: o.agent,
      bottles: ['fake'],
      backend: 'fake',
      image: 'fake',
      status: 'running',
      sessionId: `session-${o.slug}`,
      cwd: '/workspace',
      branch: `bb/${o.agent}-${o.forge.issue}`,
      forge: {
        kind: o.forge.kind,
        site: o.forge.site,
        owner: o.forge.owner,
        repo: o.forge.repo,
        issue: o.forge.issue,
        pr: undefined,
        cloneUrl: o.forge.cloneUrl,
      },
      turns: [],
      current: { turn: 1, prompt: o.prompt, startedAt: new Date().toISOString() },
      createdAt: new Date().toISOString(),
    };
    writeMeta(meta, this.env);
    try {
      // As the real runner: asked before the agent starts; what was made goes when it throws.
      await o.fence?.();
    } catch (err) {
      await this.destroy(o.slug);
      throw err;
    }
    this.#begin(o.slug);
  }

  async startResume(o: Parameters<BottleRunner['startResume']>[0]): Promise<void> {
    this.calls.push(`resume ${o.slug} ${o.prompt}`);
    this.resumes.push(o);
    const meta = readMeta(o.slug, this.env);
    if (meta?.status !== 'frozen')
      throw new BbError(
        'CONFLICT',
        `bottle ${o.slug} is ${meta?.status}; only a frozen bottle can be resumed`,
      );
    this.#take('resume');
    const hold = this.#hold.get('next');
    this.#hold.delete('next');
    await hold;
    await o.fence?.();
    meta.status = 'running';
    if (o.freshSession) {
      meta.sessionId = `session-${o.slug}-${meta.turns.length + 1}`;
      meta.sessionStart = meta.turns.length + 1;
    }
    meta.current = {
      turn: meta.turns.length + 1,
      prompt: o.prompt,
      startedAt: new Date().toISOString(),
    };
    writeMeta(meta, this.env);
    this.#begin(o.slug);
  }

  #begin(slug: string): void {
    this.started.push(slug);
    const p = bottlePaths(slug, this.env);
    mkdirSync(p.sock, { recursive: true });
    writeFileSync(join(p.sock, 'forge.sock'), '');
    this.#gone.delete(slug);
    let exit!: (code: number) => void;
    const exited = new Promise<number>((r) => {
      exit = r;
    });
    this.#turns.set(slug, { exit, exited });
  }

  async finishTurn(slug: string): Promise<TurnOutcome> {
    const meta = readMeta(slug, this.env);
    if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug}`);
    const turn = this.#turns.get(slug);
    if (meta.status === 'frozen' || !turn) {
      const last = meta.turns.at(-1);
      return {
        slug,
        exitCode: last?.exitCode ?? -1,
        ok: last?.ok ?? false,
        sessionId: undefined,
        output: '',
      };
    }
    const code = await turn.exited;
    this.#take('finish');
    const m = readMeta(slug, this.env)!;
    const current = m.current!;
    const tokens = this.#tokens.get(slug);
    this.#tokens.delete(slug);
    m.turns.push({
      ...current,
      exitCode: code,
      ok: code === 0,
      ...(tokens !== undefined ? { tokens } : {}),
      finishedAt: new Date().toISOString(),
    });
    m.current = null;
    m.status = 'frozen';
    const warm = this.warm && code === 0 ? this.warm : undefined;
    const until = new Date(Date.now() + (warm?.ms ?? 0)).toISOString();
    m.warm = warm
      ? { until, agent: `${slug}-agent`, nextTurn: m.turns.length + 1, bytes: warm.bytes, key: 'k' }
      : null;
    writeMeta(m, this.env);
    this.#turns.delete(slug);
    return {
      slug,
      exitCode: code,
      ok: code === 0,
      sessionId: m.sessionId ?? undefined,
      output: '',
      ...(warm ? { warm: { until, bytes: warm.bytes } } : {}),
    };
  }

  async cool(slug: string): Promise<boolean> {
    const m = readMeta(slug, this.env);
    if (!m?.warm) return false;
    this.calls.push(`cool ${slug}`);
    m.warm = null;
    writeMeta(m, this.env);
    return true;
  }

  async stopAgent(slug: string): Promise<void> {
    this.calls.push(`stop ${slug}`);
    this.#turns.get(slug)?.exit(143);
  }

  async destroy(slug: string): Promise<void> {
    this.calls.push(`destroy ${slug}`);
    this.#turns.get(slug)?.exit(137);
    this.#turns.delete(slug);
    rmSync(bottlePaths(slug, this.env).dir, { recursive: true, force: true });
  }

  async containers(slug: string): Promise<BottleInfo[]> {
    if (!this.#turns.has(slug)) return [];
    const info = (role: string): BottleInfo =>
      ({
        id: `${slug}-${role}`,
        name: `bb-${slug}-${role}`,
        image: 'fake',
        state: 'running',
        exitCode: null,
        oomKilled: false,
        labels: { 'bb.slug': slug, 'bb.role': role },
        isolation: { network: 'none', capDrop: [], readOnlyRootfs: true, user: '1000' },
      }) as unknown as BottleInfo;
    return this.#gone.has(slug) ? [info('agent')] : [info('gate'), info('agent')];
  }

  async ours(): Promise<BottleInfo[]> {
    const all: BottleInfo[] = [];
    for (const slug of this.#turns.keys()) all.push(...(await this.containers(slug)));
    return all;
  }

  /** The bottle's directory (tests look into it). */
  dir(slug: string): string {
    return bottlePaths(slug, this.env).dir;
  }

  memoryOf(): number {
    return this.bytes;
  }

  // ---- the agents, as the test drives them ----

  /** Bottles whose agent runs now. */
  get runningSlugs(): string[] {
    return [...this.#turns.keys()];
  }

  isRunning(slug: string): boolean {
    return this.#turns.has(slug);
  }

  /** What the agent of `slug` does through its sidecar. */
  agent(slug: string) {
    const p = bottlePaths(slug, this.env);
    const queue = new QueueWriter(p.queue, slug);
    const op = (method: string, data: Record<string, unknown>) => {
      // The op log as the sidecar keeps it, so a record has something to cover.
      writeFileSync(join(p.dir, 'state', 'ops.jsonl'), `${JSON.stringify({ method, ...data })}\n`, {
        flag: 'a',
      });
      queue.write('op', { method, ...data });
    };
    return {
      openPr: (prNumber: number) => op('open_pr', { prNumber }),
      comment: () => op('post_comment', { issue: 1 }),
      done: (status: 'success' | 'failure' | 'blocked' = 'success', summary = 'did it') =>
        queue.write('done', { status, summary }),
      checkin: () => queue.write('checkin', { method: 'read_issue' }),
      /** The turn reports this many input tokens when it ends. */
      usage: (tokens: number) => this.#tokens.set(slug, tokens),
      exit: (code = 0) => this.#turns.get(slug)?.exit(code),
      /** The sidecar container goes away (the agent's stays). */
      removeSidecar: () => this.#gone.add(slug),
    };
  }

  /** Forget every running turn without ending it (what an orchestrator killed mid-turn leaves). */
  async waitExit(slug: string): Promise<number | undefined> {
    return this.#turns.get(slug)?.exited;
  }
}
