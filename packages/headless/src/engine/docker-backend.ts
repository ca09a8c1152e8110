import { BbError, isBbError } from '@bb/errors';
import { LABEL } from '@bb/names';
import type Docker from 'dockerode';
import pkg from '../../package.json' with { type: 'json' };
import {
  type Backend,
  type BottleInfo,
  type BottleSpec,
  type BottleState,
  type BuildImageOptions,
  HOST_LABELS,
  NETNS_LABEL,
  VERSION_LABEL,
  type WaitResult,
} from './backend';
import { buildImageOn } from './image-build';

export interface DockerBackendOptions {
  /** A dockerode client to use. @default one from DOCKER_HOST (or the local socket) */
  docker?: Docker;
  /**
   * How many holders of empty network namespaces to keep ready (`takeNetns`).
   * @default BB_NETNS_POOL, else 2; 0 keeps none
   */
  netnsPool?: number;
  /** The image holders run in (they only sleep). @default BB_BASE_IMAGE, else bb-base:latest */
  netnsImage?: string;
}

/** A holder sleeps this long, then goes by itself (a process that died keeps none for long). */
const NETNS_LIFE_S = 600;
/** Only holders younger than this are handed out: each outlives the start of its bottle. */
const NETNS_FRESH_MS = 300_000;
/** A refill waits this long after a holder was taken: it stays off the launch's way. */
const NETNS_REFILL_DELAY_MS = 2_000;

const NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$/;
/** How long one long wait on the engine may last before it is checked against `inspect`. */
const WAIT_SLICE_MS = 10_000;
/** How long any other call to the engine may take (looking: less). */
const CALL_MS = 120_000;
const LOOK_MS = 30_000;

/**
 * `p`, or a BACKEND_UNAVAILABLE error after `ms`: a request that was in
 * flight when its connection was cut is never settled by dockerode (seen with
 * `wait`), so every call has a deadline of its own. `onLate` cleans up.
 */
function bounded<T>(p: Promise<T>, ms: number, what: string, onLate?: () => void): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  p.catch(() => {});
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        onLate?.();
        reject(
          new BbError(
            'BACKEND_UNAVAILABLE',
            `the Docker engine did not answer ${what} within ${ms} ms`,
          ),
        );
      }, ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
const isUnavailable = (err: unknown) =>
  isBbError(err, 'BACKEND_UNAVAILABLE') || (err as { name?: string }).name === 'AbortError';

/**
 * Bottles as Docker containers (through dockerode). Agents run with no network,
 * every capability dropped, no privilege escalation, a read-only root
 * filesystem, pids and memory limits; all of it read back by `inspect`.
 */
export class DockerBackend implements Backend {
  readonly name = 'docker';
  readonly isolates = true;
  readonly mapsMounts = true;
  #client: Docker | Promise<Docker>;
  readonly #netnsSize: number;
  readonly #netnsImage: string;
  #netns: Array<{ id: string; at: number }> = [];
  #netnsFilling = false;

  constructor(options: DockerBackendOptions = {}) {
    const pool = options.netnsPool ?? process.env['BB_NETNS_POOL'];
    this.#netnsSize = pool === undefined || pool === '' ? 2 : Number(pool);
    if (!Number.isInteger(this.#netnsSize) || this.#netnsSize < 0 || this.#netnsSize > 64)
      throw new BbError(
        'INVALID_INPUT',
        `BB_NETNS_POOL ${JSON.stringify(pool)} must be how many network namespaces to keep ready, 0 to 64`,
      );
    this.#netnsImage = options.netnsImage ?? process.env['BB_BASE_IMAGE'] ?? 'bb-base:latest';
    // dockerode (with its gRPC and protobuf dependencies) loads on first use, so
    // programs that construct a backend but never call it start quickly.
    this.#client =
      options.docker ??
      import('dockerode').then((m) => {
        const client = new m.default();
        this.#client = client;
        return client;
      });
    if (this.#client instanceof Promise) this.#client.catch(() => {});
  }

  get #docker(): Promise<Docker> {
    return Promise.resolve(this.#client);
  }

  async takeNetns(): Promise<string | undefined> {
    let got: { id: string; at: number } | undefined;
    for (;;) {
      got = this.#netns.shift();
      if (!got) break;
      // Fresh, and still there (an engine restarted meanwhile keeps none).
      if (Date.now() - got.at < NETNS_FRESH_MS) {
        const state = await this.inspect(got.id).then(
          (i) => i?.state,
          () => undefined,
        );
        if (state === 'running') break;
      }
      void this.destroy(got.id).catch(() => {});
    }
    const t = setTimeout(() => this.#fillNetns(), got ? NETNS_REFILL_DELAY_MS : 0);
    t.unref();
    return got?.id;
  }

  /** Make holders until the pool is full: hardened, no network, sleeping, gone by themselves. */
  #fillNetns(): void {
    if (this.#netnsFilling || this.#netnsSize === 0) return;
    this.#netnsFilling = true;
    void (async () => {
      const docker = await this.#docker;
      while (this.#netns.length < this.#netnsSize) {
        const c = await docker.createContainer({
          Image: this.#netnsImage,
          Cmd: ['sleep', String(NETNS_LIFE_S)],
          User: '65534:65534',
          Labels: {
            ...Object.fromEntries(HOST_LABELS.map((k) => [k, ''])),
            [LABEL.role]: 'netns',
            [VERSION_LABEL]: pkg.version,
          },
          HostConfig: {
            NetworkMode: 'none',
            AutoRemove: true,
            ReadonlyRootfs: true,
            CapDrop: ['ALL'],
            SecurityOpt: ['no-new-privileges'],
            Memory: 16 * 1024 * 1024,
            PidsLimit: 4,
          },
        });
        try {
          await c.start();
        } catch (err) {
          // A holder that never ran would never go by itself.
          await c.remove({ force: true }).catch(() => {});
          throw err;
        }
        this.#netns.push({ id: c.id, at: Date.now() });
      }
    })()
      .catch(() => {})
      .finally(() => {
        this.#netnsFilling = false;
      });
  }

  #identity: Promise<string> | undefined;

  /**
   * `docker:<name>:<data root>` as the engine says: its `ID` is not enough, every
   * daemon on one machine has the same one (it comes from a host file).
   */
  identity(): Promise<string> {
    this.#identity ??= (async () => {
      const info = (await (await this.#docker).info()) as { Name?: string; DockerRootDir?: string };
      return `docker:${info.Name ?? '?'}:${info.DockerRootDir ?? '?'}`;
    })().catch((err) => {
      this.#identity = undefined;
      throw this.#error(err, 'the engine', {});
    });
    return this.#identity;
  }

  async ensureImage(image: string): Promise<void> {
    try {
      await (await this.#docker).getImage(image).inspect();
    } catch (err) {
      throw this.#error(err, `image ${image}`, {
        notFound: missingImage(image),
      });
    }
  }

  async imageId(image: string): Promise<string | undefined> {
    try {
      return (await (await this.#docker).getImage(image).inspect()).Id;
    } catch {
      return undefined;
    }
  }

  async create(spec: BottleSpec): Promise<string> {
    if (!NAME.test(spec.name))
      throw new BbError(
        'INVALID_INPUT',
        `bottle name ${JSON.stringify(spec.name)} is not a valid container name`,
      );
    if (!spec.labels[LABEL.slug] || !spec.labels[LABEL.role]) {
      throw new BbError(
        'INVALID_INPUT',
        `bottle ${spec.name} needs the labels bb.slug and bb.role`,
      );
    }
    // No inspect first (an engine round trip on every launch): the engine's own
    // "no such image" is answered with the same fix as ensureImage's.
    const harden = spec.harden ?? true;
    try {
      const c = await (await this.#docker).createContainer({
        name: spec.name,
        Image: spec.image,
        Cmd: spec.cmd,
        Env: Object.entries(spec.env ?? {}).map(([k, v]) => `${k}=${v}`),
        ...(spec.user ? { User: spec.user } : {}),
        ...(spec.workdir ? { WorkingDir: spec.workdir } : {}),
        // Every label the host reads is the host's, whatever the image carries (I10).
        Labels: {
          ...Object.fromEntries(HOST_LABELS.map((k) => [k, ''])),
          ...spec.labels,
          [VERSION_LABEL]: pkg.version,
          [NETNS_LABEL]: spec.netns && spec.network === 'none' ? spec.netns : '',
        },
        ...(spec.entrypoint ? { Entrypoint: spec.entrypoint } : {}),
        // How the host stops it is the host's too (an image's STOPSIGNAL could make every
        // stop wait out its timeout).
        StopSignal: 'SIGTERM',
        HostConfig: {
          NetworkMode:
            spec.netns && spec.network === 'none' ? `container:${spec.netns}` : spec.network,
          Binds: (spec.mounts ?? []).map((m) => {
            const opts = [m.readOnly ? 'ro' : '', m.propagation ?? ''].filter(Boolean).join(',');
            return `${m.source}:${m.target}${opts ? `:${opts}` : ''}`;
          }),
          Tmpfs: spec.tmpfs ?? {},
          ...(spec.groups?.length ? { GroupAdd: spec.groups.map(String) } : {}),
          ReadonlyRootfs: spec.readOnlyRootfs ?? false,
          ...(harden ? { CapDrop: ['ALL'], SecurityOpt: ['no-new-privileges'] } : {}),
          ...(spec.resources?.memoryBytes
            ? { Memory: spec.resources.memoryBytes, MemorySwap: spec.resources.memoryBytes }
            : {}),
          ...(spec.resources?.pidsLimit ? { PidsLimit: spec.resources.pidsLimit } : {}),
          ...(spec.init ? { Init: true } : {}),
          ...(spec.resources?.cpus ? { NanoCpus: Math.round(spec.resources.cpus * 1e9) } : {}),
          // What a bottle prints is kept on the host's disk: bounded, like everything else of it.
          LogConfig: { Type: 'json-file', Config: { 'max-size': '16m', 'max-file': '2' } },
        },
      });
      return c.id;
    } catch (err) {
      const noImage = /no such image/i.test((err as { message?: string }).message ?? '');
      throw this.#error(err, `bottle ${spec.name}`, {
        conflict: `a bottle named ${spec.name} already exists; destroy it or choose another slug`,
        ...(noImage ? { notFound: missingImage(spec.image) } : {}),
      });
    }
  }

  async start(id: string): Promise<void> {
    await this.#call(id, (c) => c.start());
  }

  /**
   * Wait for the bottle's process to exit. The engine's long wait is asked in
   * slices and checked against `inspect` between them, so a dropped engine
   * connection (a restart, a proxy) neither hangs this nor loses the exit:
   * it keeps asking, with a backoff, until the engine answers again.
   */
  async wait(
    id: string,
    options: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<WaitResult> {
    const deadline = options.timeoutMs ? Date.now() + options.timeoutMs : Number.POSITIVE_INFINITY;
    let pause = 250;
    for (;;) {
      if (options.signal?.aborted) throw new BbError('ABORTED', `stopped waiting for bottle ${id}`);
      const slice = Math.min(WAIT_SLICE_MS, deadline - Date.now());
      if (slice <= 0)
        throw new BbError('TIMEOUT', `bottle ${id} did not exit within ${options.timeoutMs} ms`);
      const abort = new AbortController();
      const cancel = () => abort.abort();
      options.signal?.addEventListener('abort', cancel, { once: true });
      try {
        const res = (await this.#call(
          id,
          (c) => c.wait({ abortSignal: abort.signal }),
          slice,
          () => abort.abort(),
        )) as {
          StatusCode: number;
        };
        const info = await this.inspect(id).catch(() => undefined);
        return { exitCode: res.StatusCode, oomKilled: info?.oomKilled ?? false };
      } catch (err) {
        if (isBbError(err, 'NOT_FOUND')) throw err;
        // Timed out or the connection went: look, then ask again.
        const info = await this.inspect(id).catch(() => undefined);
        if (info?.state === 'exited')
          return { exitCode: info.exitCode ?? -1, oomKilled: info.oomKilled };
        if (info?.state === 'running') {
          // The engine answers and the bottle runs on: only the slice ended.
          pause = 250;
          continue;
        }
        if (info === undefined && !isUnavailable(err)) {
          // The engine answers and the bottle is gone.
          const gone = await this.#exists(id);
          if (!gone) throw new BbError('NOT_FOUND', `bottle ${id} does not exist`);
        }
        await new Promise((r) => setTimeout(r, pause));
        pause = Math.min(pause * 2, 5000);
      } finally {
        options.signal?.removeEventListener('abort', cancel);
      }
    }
  }

  async #exists(id: string): Promise<boolean> {
    try {
      await (await this.#docker).getContainer(id).inspect();
      return true;
    } catch (err) {
      return (err as { statusCode?: number }).statusCode !== 404;
    }
  }

  async stop(id: string, timeoutMs = 10_000): Promise<void> {
    try {
      await this.#call(id, (c) => c.stop({ t: Math.ceil(timeoutMs / 1000) }), timeoutMs + CALL_MS);
    } catch (err) {
      // 304: already stopped.
      if ((err as { cause?: { statusCode?: number } }).cause?.statusCode !== 304) throw err;
    }
  }

  async signal(id: string, signal: NodeJS.Signals): Promise<void> {
    await this.#call(id, (c) => c.kill({ signal }));
  }

  async buildImage(
    dockerfile: string,
    tag: string,
    options: BuildImageOptions = {},
  ): Promise<void> {
    await buildImageOn(await this.#docker, dockerfile, tag, options, (err) =>
      this.#error(err, `building ${tag}`, {}),
    );
  }

  /** What the engine lists of `what` with these labels, within the look-up bound. */
  async #listed<T>(
    what: 'images' | 'containers',
    list: (filters: { label: string[] }) => Promise<T[]>,
    labels: Record<string, string>,
  ): Promise<T[]> {
    try {
      return await bounded(
        list({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) }),
        LOOK_MS,
        `listing ${what}`,
      );
    } catch (err) {
      if (isBbError(err)) throw err;
      throw this.#error(err, what, {});
    }
  }

  async removeImages(labels: Record<string, string>): Promise<void> {
    const docker = await this.#docker;
    const images = await this.#listed(
      'images',
      (filters) => docker.listImages({ filters }),
      labels,
    );
    for (const i of images)
      await docker
        .getImage(i.Id)
        .remove({ force: true })
        .catch((err: { statusCode?: number }) => {
          if (err.statusCode !== 404) throw this.#error(err, `image ${i.Id}`, {});
        });
  }

  async removeImage(ref: string): Promise<void> {
    const docker = await this.#docker;
    await docker
      .getImage(ref)
      .remove({ force: true })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 404) throw this.#error(err, `image ${ref}`, {});
      });
  }

  async freeze(id: string): Promise<void> {
    await this.#call(id, (c) => c.pause());
  }

  async rehydrate(id: string): Promise<void> {
    await this.#call(id, (c) => c.unpause());
  }

  async destroy(id: string): Promise<void> {
    try {
      await this.#call(id, (c) => c.remove({ force: true, v: true }));
    } catch (err) {
      if (isBbError(err, 'NOT_FOUND')) return;
      // Another caller is removing it: done once it is gone.
      if (!(isBbError(err, 'CONFLICT') && /already in progress/.test(err.message))) throw err;
      for (let i = 0; await this.inspect(id); i++) {
        if (i >= 100)
          throw new BbError(
            'TIMEOUT',
            `bottle ${id} is still being removed after 10 s: destroy it again`,
          );
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  }

  async list(labels: Record<string, string>): Promise<BottleInfo[]> {
    const docker = await this.#docker;
    const found = await this.#listed(
      'containers',
      (filters) => docker.listContainers({ all: true, filters }),
      labels,
    );
    const out: BottleInfo[] = [];
    for (const c of found) {
      const info = await this.inspect(c.Id);
      if (info) out.push(info);
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async inspect(id: string): Promise<BottleInfo | undefined> {
    let i: Docker.ContainerInspectInfo;
    try {
      i = await bounded((await this.#docker).getContainer(id).inspect(), LOOK_MS, `inspect ${id}`);
    } catch (err) {
      const e = isBbError(err) ? err : this.#error(err, `bottle ${id}`, {});
      if (isBbError(e, 'NOT_FOUND')) return undefined;
      throw e;
    }
    const s = i.State;
    const state: BottleState = s.Paused
      ? 'paused'
      : s.Running
        ? 'running'
        : s.Status === 'created'
          ? 'created'
          : 'exited';
    return {
      id: i.Id,
      name: i.Name.replace(/^\//, ''),
      image: i.Config.Image,
      imageId: i.Image,
      state,
      exitCode: state === 'exited' ? s.ExitCode : null,
      oomKilled: s.OOMKilled,
      labels: i.Config.Labels ?? {},
      isolation: {
        // A namespace joined from one of our holders (made with no network) is none.
        network:
          i.Config.Labels?.[NETNS_LABEL] &&
          i.HostConfig.NetworkMode === `container:${i.Config.Labels[NETNS_LABEL]}`
            ? 'none'
            : (i.HostConfig.NetworkMode ?? ''),
        capDrop: i.HostConfig.CapDrop ?? [],
        noNewPrivileges: (i.HostConfig.SecurityOpt ?? []).some((o: string) =>
          o.startsWith('no-new-privileges'),
        ),
        readOnlyRootfs: i.HostConfig.ReadonlyRootfs ?? false,
        user: i.Config.User ?? '',
        pidsLimit: i.HostConfig.PidsLimit ?? null,
        memoryBytes: i.HostConfig.Memory || null,
      },
    };
  }

  async logs(id: string, options: { sinceMs?: number } = {}): Promise<string> {
    const buf = (await this.#call(id, (c) =>
      c.logs({
        stdout: true,
        stderr: true,
        follow: false,
        // The engine takes fractions of a second.
        ...(options.sinceMs !== undefined ? { since: (options.sinceMs / 1000).toFixed(3) } : {}),
      } as Docker.ContainerLogsOptions & { follow: false }),
    )) as unknown as Buffer;
    return demux(buf);
  }

  async processes(id: string): Promise<number> {
    const top = await this.#call(id, (c) => c.top());
    return ((top as { Processes?: unknown[][] }).Processes ?? []).length;
  }

  async memoryUsage(id: string): Promise<number | undefined> {
    const stats = (await this.#call(id, (c) =>
      c.stats({ stream: false, 'one-shot': true } as { stream: false }),
    )) as { memory_stats?: { usage?: number; stats?: { inactive_file?: number } } };
    const m = stats.memory_stats;
    if (!m?.usage) return undefined;
    // As `docker stats` reports it: the page cache the kernel can drop at once is not held.
    return m.usage - (m.stats?.inactive_file ?? 0);
  }

  async #call<T>(
    id: string,
    fn: (c: Docker.Container) => Promise<T>,
    ms = CALL_MS,
    onLate?: () => void,
  ): Promise<T> {
    try {
      return await bounded(
        fn((await this.#docker).getContainer(id)),
        ms,
        `on bottle ${id}`,
        onLate,
      );
    } catch (err) {
      if (isBbError(err)) throw err;
      throw this.#error(err, `bottle ${id}`, {});
    }
  }

  #error(err: unknown, what: string, hints: { notFound?: string; conflict?: string }): BbError {
    const e = err as { statusCode?: number; code?: string; message?: string };
    if (
      e.code === 'ECONNREFUSED' ||
      e.code === 'ENOENT' ||
      e.code === 'EACCES' ||
      e.code === 'ECONNRESET' ||
      // A connection the engine (or whatever is in front of it) closed while we wrote.
      e.code === 'EPIPE' ||
      e.code === 'ECONNABORTED'
    ) {
      const host = process.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock';
      return new BbError(
        'BACKEND_UNAVAILABLE',
        `the Docker engine at ${host} does not answer (${e.code}): start it (scripts/ensure-docker.sh) or set DOCKER_HOST`,
        { cause: err, data: { dockerHost: host } },
      );
    }
    if (e.statusCode === 404)
      return new BbError('NOT_FOUND', hints.notFound ?? `${what} does not exist`, { cause: err });
    if (e.statusCode === 409)
      return new BbError('CONFLICT', hints.conflict ?? `${what}: ${e.message ?? 'conflict'}`, {
        cause: err,
      });
    return new BbError('BACKEND_ERROR', `Docker failed on ${what}: ${e.message ?? String(err)}`, {
      cause: err,
    });
  }
}

/** The script of bot-bottle's that builds `image`, for the images it builds itself. */
export function imageBuildScript(image: string): string | undefined {
  const repo = image.replace(/@.*$/, '').replace(/:[^/:]*$/, '');
  return {
    'bb-base': 'scripts/build-base-image.sh',
    'bb-agents': 'scripts/build-agents-image.sh',
    'bb-debian': 'scripts/build-debian-image.sh',
    'forklift/kitchen-sink': 'scripts/build-kitchen-sink-image.sh',
  }[repo];
}

const missingImage = (image: string) => {
  const script = imageBuildScript(image);
  return `image ${image} is not on this Docker engine: ${script ? `build it with sh ${script} (no registry needed)` : 'build or pull it'}`;
};

/** Split Docker's multiplexed log stream (8-byte frame headers) into text. */
export function demux(buf: Buffer): string {
  if (
    buf.length >= 8 &&
    (buf[0] === 1 || buf[0] === 2) &&
    buf[1] === 0 &&
    buf[2] === 0 &&
    buf[3] === 0
  ) {
    const parts: Buffer[] = [];
    let at = 0;
    while (at + 8 <= buf.length) {
      const size = buf.readUInt32BE(at + 4);
      parts.push(buf.subarray(at + 8, at + 8 + size));
      at += 8 + size;
    }
    return Buffer.concat(parts).toString('utf8');
  }
  return buf.toString('utf8');
}
