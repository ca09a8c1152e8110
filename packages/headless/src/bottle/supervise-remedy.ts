import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { BbError, errorMessage } from '@bb/errors';
import { homeLayout, LABEL } from '@bb/names';
import { loadPolicy, REQUEST_ID, type Remediator, type SupervisedBottles } from '@bb/supervise';
import { readFileNoFollow, writeFileNoFollow } from '@bb/wall';
import { z } from 'zod';
import type { Backend } from '../engine/backend';
import { diskQuota } from '../engine/disk';
import { bbHome } from '../home';
import { providerFor, validSessionId } from '../providers';
import { routeSecrets } from './gate';
import {
  type BottleMeta,
  bottlePaths,
  GATE_USER,
  HOME_LABEL,
  homeLabel,
  listBottles,
  readMeta,
  writeMeta,
} from './layout';
import { loadAgentManifest, loadBottleManifest, memoryBytes } from './manifests';
import { removeSecret, writeSecret } from './secrets';
import { allowedBases, atomicWrite, writeOverride } from './supervise-gate';

/** What a remediation did (the same shape `@bb/supervise` records). */
export interface RemedyResult {
  ok: boolean;
  detail: string;
  image?: string;
}

export interface RemedyOptions {
  /** The engine the bottles' containers are on (absent: a platform of whole bottles, `gateWatches`). */
  backend?: Backend | undefined;
  /**
   * The bottles' gates cannot be signalled (pods, which nobody execs into): they watch
   * the generation their proxies' files are written with (`BB_PROXY_WATCH_MS`), and a
   * reload is the files and the generation written. A secret a gate does not hold yet
   * cannot reach it so: such routes are refused. @default false
   */
  gateWatches?: boolean;
  env?: Record<string, string | undefined>;
  /** How long to wait for the proxies to say the reload took. @default 10 s */
  reloadTimeoutMs?: number;
  onProgress?: (line: string) => void;
}

const FILE = { routes: 'routes.json', allowlist: 'allowlist.json' } as const;
const PROXY_FILE = { routes: 'routes.json', allowlist: 'rules.json' } as const;

/**
 * Put an approved routes file or allowlist in place for a bottle and reload its
 * proxies (SIGHUP; the table is swapped, requests in flight keep theirs). A
 * secret the new routes name for the first time is handed to the proxy the way
 * its first ones were: a 0400 file on a tmpfs only it mounts, removed once read.
 * `scope` `bottle` or `manifest` also keeps the file for the bottle's later turns.
 * Nothing is run inside any container.
 */
export async function reloadBottleProxies(
  slug: string,
  kind: 'routes' | 'allowlist',
  text: string,
  scope: 'turn' | 'bottle' | 'manifest',
  options: RemedyOptions,
): Promise<RemedyResult> {
  const env = options.env ?? process.env;
  const meta = readMeta(slug, env);
  if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug} in ${homeLayout(env).bottles}`);
  const p = bottlePaths(slug, env);
  if (meta.status !== 'running') {
    // The turn it was asked for has ended: only a lasting approval means anything now.
    if (scope === 'turn')
      return {
        ok: false,
        detail: `the turn ${slug} asked in has ended: approve with scope bottle to keep it for its next turn`,
      };
    writeOverride(slug, kind, text, env);
    atomicWrite(join(p.currentConfig, FILE[kind]), text);
    return { ok: true, detail: `kept for ${slug}'s next turn (the bottle is frozen)` };
  }
  // The gate serves the proxies when the turn started with rules or routes (their socket is there).
  const signal = options.gateWatches ? undefined : await gateToSignal(slug, p, options.backend);
  // Only secrets the proxy does not hold yet: it kept the others since it started.
  const secrets =
    kind === 'routes' ? routeSecrets(newRoutesOnly(text, join(p.proxy, 'routes.json')), env) : {};
  if (options.gateWatches && Object.keys(secrets).length)
    return {
      ok: false,
      detail: `${Object.keys(secrets).join(', ')} would be new to ${slug}'s gate, whose secrets are given at the start of a turn on this platform: add the route to the bottle's manifest for its next turn`,
    };
  const generation = randomBytes(8).toString('hex');
  let secretsDir: string | undefined;
  let rollback: (() => void) | undefined;
  try {
    if (Object.keys(secrets).length)
      secretsDir = writeSecret(
        slug,
        'gate',
        'keys.json',
        JSON.stringify(secrets),
        env,
        options.backend?.mapsMounts && process.getuid?.() === 0 ? GATE_USER : undefined,
      );
    const before = readProxyFile(join(p.proxy, PROXY_FILE[kind]));
    atomicWrite(join(p.proxy, PROXY_FILE[kind]), text);
    atomicWrite(join(p.proxy, 'generation'), generation);
    rollback = () => {
      // A reload that was not confirmed is undone: what was approved is never left in
      // force while the desk records it as failed.
      if (before === undefined) return;
      atomicWrite(join(p.proxy, PROXY_FILE[kind]), before);
      atomicWrite(join(p.proxy, 'generation'), randomBytes(8).toString('hex'));
      void signal?.().catch(() => {});
    };
    // A gate that watches its generation reloads by itself.
    await signal?.();
    const status = await waitForReload(
      join(p.state, 'proxy-status.json'),
      generation,
      options.reloadTimeoutMs ?? 10_000,
    );
    const outcome = status[kind === 'routes' ? 'routes' : 'rules'];
    if (outcome !== 'ok') {
      rollback();
      return { ok: false, detail: `the proxies kept the old ${FILE[kind]}: ${outcome}` };
    }
  } catch (err) {
    rollback?.();
    throw err;
  } finally {
    if (secretsDir) removeSecret(secretsDir, 'keys.json');
  }
  atomicWrite(join(p.currentConfig, FILE[kind]), text);
  // Kept for later turns only once it took: a file the proxies refused never outlives this turn.
  if (scope !== 'turn') writeOverride(slug, kind, text, env);
  return {
    ok: true,
    detail: `reloaded ${FILE[kind]} in ${slug}'s proxies (generation ${generation})`,
  };
}

/** A proxy file as it is now (the host's own folder), or undefined when there is none. */
function readProxyFile(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** How to tell a bottle's gate to reload: SIGHUP to its container. */
async function gateToSignal(
  slug: string,
  p: ReturnType<typeof bottlePaths>,
  backend: Backend | undefined,
): Promise<() => Promise<void>> {
  const gate = backend
    ? (await backend.list({ [LABEL.slug]: slug })).find(
        (c) => c.labels[LABEL.role] === 'gate' && c.state === 'running',
      )
    : undefined;
  if (!backend || !gate || !existsSync(join(p.sock, 'cred.sock')))
    throw new BbError(
      'CONFLICT',
      `${slug} runs without egress and credential proxies (its manifests name no host and no route), so there is nothing to reload; the change applies from its next turn`,
    );
  const send = backend.signal?.bind(backend);
  if (!send)
    throw new BbError(
      'INVALID_INPUT',
      `the ${backend.name} backend cannot signal a bottle's proxies`,
    );
  return () => send(gate.id, 'SIGHUP');
}

async function waitForReload(
  file: string,
  generation: string,
  timeoutMs: number,
): Promise<{ rules: string; routes: string }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      // The gate's folder: read without following links, bounded (never a FIFO that blocks).
      const buf = readFileNoFollow(dirname(file), basename(file), { maxBytes: 65536 });
      if (!buf) throw new Error('no status yet');
      const s = JSON.parse(buf.toString('utf8')) as {
        generation: string | null;
        rules: string;
        routes: string;
      };
      if (s.generation === generation) return s;
    } catch {}
    if (Date.now() > deadline)
      throw new BbError('TIMEOUT', `the proxies did not confirm the reload within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Where a rebuilt bottle's next turn is asked for (read by whoever runs its turns). */
export function resumeRequestFile(slug: string, env: Record<string, string | undefined>): string {
  return join(bottlePaths(slug, env).supervise, 'resume.json');
}

/** The resume a capability rebuild asked for, if any (and take it: it is used once). */
export function takeResumeRequest(
  slug: string,
  env: Record<string, string | undefined>,
): { prompt: string; requestId: string } | undefined {
  const dir = bottlePaths(slug, env).supervise;
  try {
    // The gate's directory: nothing there is followed, and what is read is checked.
    // Room for the quoted task however it is escaped (control characters take six bytes each).
    const buf = readFileNoFollow(dir, 'resume.json', { maxBytes: 131072 });
    if (!buf) return undefined;
    const parsed = ResumeRequestSchema.safeParse(JSON.parse(buf.toString('utf8')));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  } finally {
    rmSync(join(dir, 'resume.json'), { force: true });
  }
}

const ResumeRequestSchema = z
  .object({ requestId: z.string().regex(REQUEST_ID), prompt: z.string().max(16384) })
  .strict();

/**
 * A capability rebuild: build the approved Dockerfile on the host's engine, make
 * it the bottle's image, then stop the agent. The turn ends the ordinary way and
 * whoever runs the bottle's turns resumes it at once (same workspace, home,
 * branch and session) in a container from the new image, told the decision.
 */
export async function rebuildBottle(
  slug: string,
  dockerfile: string,
  requestId: string,
  note: string,
  options: RemedyOptions,
): Promise<RemedyResult> {
  const env = options.env ?? process.env;
  const meta = readMeta(slug, env);
  if (!meta) throw new BbError('NOT_FOUND', `no bottle ${slug} in ${homeLayout(env).bottles}`);
  const backend = options.backend;
  if (!backend?.buildImage)
    throw new BbError(
      'UNSUPPORTED',
      `${backend ? `the ${backend.name} backend` : 'this platform'} cannot build images`,
    );
  const n = meta.turns.length + (meta.current ? 1 : 0);
  const tag = `bb-rebuilt-${slug}:turn${n}-${randomBytes(3).toString('hex')}`;
  options.onProgress?.(`building ${tag}`);
  try {
    await backend.buildImage(dockerfile, tag, {
      labels: {
        [LABEL.slug]: slug,
        [HOME_LABEL]: homeLabel(env),
        [LABEL.superviseRequest]: requestId,
      },
      // The build runs what the agent wrote: no more than its bottle may take.
      limits: {
        memoryBytes: buildMemory(meta, env),
        cpus: 1,
        timeoutMs: buildTimeout(env),
        maxImageBytes: meta.diskBytes ?? 16 * 1024 ** 3,
        // What its steps write is bounded while they run, as the bottle's own disk is.
        diskBytes: meta.diskBytes ?? diskQuota(undefined, env) ?? 10 * 1024 ** 3,
        pidsLimit: 1024,
      },
      workDir: join(bbHome(env), 'builds'),
      // Its steps reach the bottle's own hosts and the operator's registries, through a proxy.
      egress: buildEgress(slug, env),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    });
  } catch (err) {
    return { ok: false, detail: errorMessage(err).slice(0, 2000) };
  }
  writeOverride(slug, 'dockerfile', dockerfile, env);
  atomicWrite(join(bottlePaths(slug, env).currentConfig, 'Dockerfile'), dockerfile);
  // The conversation is kept whatever the agent does next (ends its turn, or is stopped):
  // the session its CLI named so far is written down now, before anyone stops it. Read
  // first: the record is then read, changed and written with nothing awaited between,
  // so a turn that ends meanwhile is never written over.
  const named = await sessionSoFar(readMeta(slug, env) ?? meta, options);
  const fresh = readMeta(slug, env) ?? meta;
  fresh.image = tag;
  fresh.rebuilt = [...(fresh.rebuilt ?? []), tag];
  if (fresh.current) fresh.sessionId ??= named ?? null;
  writeMeta(fresh, env);
  writeFileNoFollow(
    bottlePaths(slug, env).supervise,
    'resume.json',
    JSON.stringify({ requestId, prompt: rebuiltPrompt(note, fresh.current?.prompt) }),
  );
  return {
    ok: true,
    detail: `rebuilt as ${tag}; the agent continues in a new container`,
    image: tag,
  };
}

/** The longest task quoted back to the agent after a rebuild (the rest: its conversation). */
const MAX_TASK_QUOTE = 12_000;

/**
 * What the agent is told in its rebuilt image: the decision, where it is, and the
 * task its turn began with (so even a session that could not be kept knows it).
 */
export function rebuiltPrompt(note: string, task: string | undefined): string {
  const said = `${note}. Your bottle was rebuilt from the Dockerfile you proposed (now at /etc/bot-bottle/current-config/Dockerfile); this is the same workspace, branch and conversation. Carry on with your task.`;
  if (!task) return said;
  const quoted = task.length > MAX_TASK_QUOTE ? `${task.slice(0, MAX_TASK_QUOTE)}\n[… cut]` : task;
  return `${said}\n\nThe task, as your turn began:\n\n${quoted}`;
}

/**
 * The session the bottle's running agent has named so far, read from its output
 * (the engine's log of it, as data): its CLI names it on its first line.
 */
async function sessionSoFar(meta: BottleMeta, options: RemedyOptions): Promise<string | undefined> {
  if (!meta.current) return undefined;
  try {
    const agent = (await options.backend?.list({ [LABEL.slug]: meta.slug }))?.find(
      (c) => c.labels[LABEL.role] === 'agent' && c.state === 'running',
    );
    if (!agent) return undefined;
    const { manifest } = loadAgentManifest(meta.agent, options.env ?? process.env);
    const output = await options.backend!.logs(agent.id, {
      sinceMs: Date.parse(meta.current.startedAt),
    });
    return validSessionId(providerFor(manifest.provider).parseResult(output, 1).sessionId);
  } catch {
    return undefined;
  }
}

/** How long an agent has to end its turn after a rebuild's approval (`BB_REBUILD_GRACE`, seconds). @default 20 s */
export function rebuildGrace(env: Record<string, string | undefined>): number {
  return secondsOf(env, 'BB_REBUILD_GRACE', { defaultMs: 20_000, unset: '20 s', zero: true });
}

/** `name` of `env` as a number of seconds, in ms; `defaultMs` when unset. */
function secondsOf(
  env: Record<string, string | undefined>,
  name: string,
  o: { defaultMs: number; unset: string; zero?: boolean },
): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return o.defaultMs;
  const s = Number(raw);
  if (!Number.isFinite(s) || s < 0 || (s === 0 && !o.zero))
    throw new BbError(
      'INVALID_INPUT',
      `${name}=${JSON.stringify(raw)} is not a number of seconds; unset it for ${o.unset}`,
    );
  return Math.round(s * 1000);
}

/**
 * After a rebuild's approval reached the agent: wait up to `graceMs` for it to
 * end its turn itself, then stop it. Its session was written down when the image
 * was built: either way the next turn resumes it.
 */
export async function settleRebuild(
  slug: string,
  options: RemedyOptions & { graceMs?: number },
): Promise<void> {
  const deadline = Date.now() + (options.graceMs ?? rebuildGrace(options.env ?? process.env));
  const backend = options.backend;
  if (!backend) return;
  for (;;) {
    const agents = (await backend.list({ [LABEL.slug]: slug })).filter(
      (c) => c.labels[LABEL.role] === 'agent' && (c.state === 'running' || c.state === 'paused'),
    );
    if (!agents.length) return;
    if (Date.now() > deadline) {
      for (const c of agents) await backend.stop(c.id, 5000);
      return;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The desk's view of this `BB_HOME`'s bottles. */
export function supervisedBottles(
  env: Record<string, string | undefined> = process.env,
): SupervisedBottles {
  return {
    slugs: () => listBottles(env),
    dir: (slug) => bottlePaths(slug, env).dir,
    turn: (slug) => readMeta(slug, env)?.current?.turn ?? null,
    allowedBases: (slug) => {
      const meta = readMeta(slug, env);
      return meta ? allowedBases(meta, env) : [];
    },
  };
}

/**
 * The remediations of this package's bottles, for `SuperviseDesk`. Without a backend
 * (`gateWatches`: a platform of pods) only the proxies are reloaded, and a rebuild
 * is not offered.
 */
export function bottleRemediator(options: RemedyOptions): Remediator {
  return {
    reloadProxies: (slug, kind, text, scope) =>
      reloadBottleProxies(slug, kind, text, scope, options),
    ...(options.backend?.buildImage
      ? {
          rebuild: (slug: string, dockerfile: string, requestId: string, note: string) =>
            rebuildBottle(slug, dockerfile, requestId, note, options),
          afterRebuild: (slug: string) => settleRebuild(slug, options),
        }
      : {}),
  };
}

/** The routes of `text` that reference a secret the current routes file does not. */
function newRoutesOnly(text: string, currentFile: string): string {
  type Routes = { routes: Array<{ prefix: string; headers: Record<string, string> }> };
  let held = new Set<string>();
  try {
    held = new Set(
      (JSON.parse(readFileSync(currentFile, 'utf8')) as Routes).routes.flatMap((r) =>
        Object.values(r.headers),
      ),
    );
  } catch {}
  const routes = (JSON.parse(text) as Routes).routes.map((r) => ({
    ...r,
    headers: Object.fromEntries(Object.entries(r.headers).filter(([, ref]) => !held.has(ref))),
  }));
  return JSON.stringify({ routes });
}

/**
 * What a rebuild's steps may reach: the bottle's allowlist as it runs now, and the
 * package registries of the operator's policy (`buildRegistries`).
 */
export function buildEgress(slug: string, env: Record<string, string | undefined>): string[] {
  let own: string[] = [];
  try {
    const raw = JSON.parse(
      readFileSync(join(bottlePaths(slug, env).currentConfig, 'allowlist.json'), 'utf8'),
    ) as { allow?: unknown };
    if (Array.isArray(raw.allow)) own = raw.allow.filter((x): x is string => typeof x === 'string');
  } catch {}
  return [...new Set([...own, ...loadPolicy(bbHome(env)).buildRegistries])];
}

/** How long a rebuild may take (`BB_BUILD_TIMEOUT`, seconds). @default 15 min */
function buildTimeout(env: Record<string, string | undefined>): number {
  return secondsOf(env, 'BB_BUILD_TIMEOUT', { defaultMs: 15 * 60_000, unset: '15 minutes' });
}

/** The memory a bottle's image build may use: its own limit, as its manifest says. */
function buildMemory(meta: BottleMeta, env: Record<string, string | undefined>): number {
  try {
    return (
      memoryBytes(loadBottleManifest(meta.bottles[0]!, env).manifest.resources.memory) ??
      2 * 1024 ** 3
    );
  } catch {
    return 2 * 1024 ** 3;
  }
}
