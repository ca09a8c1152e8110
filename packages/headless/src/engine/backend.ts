/**
 * What a backend runs. Plain data: no Docker (or Kubernetes) types, so any
 * backend can take it.
 */
import { LABEL } from '@bb/names';

/** How `Backend.buildImage` builds. */
export interface BuildImageOptions {
  onProgress?: (line: string) => void;
  labels?: Record<string, string>;
  /**
   * What the build may take: memory, CPUs, time and the image's size; with
   * `diskBytes`, what its steps may write and how many processes they may have,
   * bounded while they run (a backend that cannot bound them refuses).
   */
  limits?: {
    memoryBytes?: number;
    cpus?: number;
    timeoutMs?: number;
    maxImageBytes?: number;
    diskBytes?: number;
    pidsLimit?: number;
  };
  /** A host directory of ours for the build's scratch files. @default the system's temp */
  workDir?: string;
  /**
   * What the build's `RUN` steps may reach, through a deny-by-default egress proxy
   * (`http_proxy`/`https_proxy`), host patterns as in an allowlist; nothing else is
   * reachable. Only a bounded build (`limits.diskBytes`) can give it. Absent or
   * empty: no network for the steps.
   */
  egress?: string[] | undefined;
}

export interface BottleSpec {
  /** A unique name, e.g. `bb-implementer-k3x9q-agent`. */
  name: string;
  image: string;
  cmd: string[];
  env?: Record<string, string>;
  /** `uid:gid`. @default the image's user */
  user?: string;
  /** More groups the user is in (a pod's `fsGroup`, say). @default none */
  groups?: number[];
  workdir?: string;
  /** Always include `bb.slug` and `bb.role`; the backend adds `bb.version`. */
  labels: Record<string, string>;
  /**
   * `propagation: 'rslave'`: what the host mounts below `source` later (it must be a
   * shared mount) appears inside too; a pooled bottle's mirror comes that way.
   */
  mounts?: Array<{ source: string; target: string; readOnly?: boolean; propagation?: 'rslave' }>;
  /** Writable scratch filesystems, e.g. `{ '/tmp': 'size=64m' }`. */
  tmpfs?: Record<string, string>;
  /** `none`: no network at all (agents). `host`: the host's network (sidecars that reach the forge). */
  network: 'none' | 'host';
  /**
   * With `network: 'none'`: join the empty network namespace (loopback only) of
   * this holder, one `takeNetns` handed out, instead of having one made at start.
   */
  netns?: string;
  readOnlyRootfs?: boolean;
  /**
   * Run a minimal init as the first process, which reaps whatever the command's
   * children leave behind (the waiter's turns). @default false
   */
  init?: boolean;
  resources?: { memoryBytes?: number; pidsLimit?: number; cpus?: number };
  /** Drop every capability and forbid privilege escalation. @default true */
  harden?: boolean;
  /**
   * The program the command runs under: `[]` runs `cmd` itself, whatever the image
   * declares (a bottle's image may be an agent's rebuilt one). @default the image's
   */
  entrypoint?: string[];
}

export type BottleState = 'created' | 'running' | 'paused' | 'exited';

/** What a backend reports about a bottle. */
export interface BottleInfo {
  id: string;
  name: string;
  image: string;
  /** The id of the image it was made from, when the backend knows it (a tag can move). */
  imageId?: string;
  state: BottleState;
  exitCode: number | null;
  /** Killed for using more memory than its limit. */
  oomKilled: boolean;
  labels: Record<string, string>;
  /** The isolation actually applied, as the backend reads it back. */
  isolation: {
    network: string;
    capDrop: string[];
    noNewPrivileges: boolean;
    readOnlyRootfs: boolean;
    user: string;
    pidsLimit: number | null;
    memoryBytes: number | null;
  };
}

export interface WaitResult {
  exitCode: number;
  oomKilled: boolean;
}

/**
 * Where bottles run. Implementations must pass `describeBackendConformance`
 * from `@bb/headless/testing`. Errors are `BbError`s: `NOT_FOUND` (no such
 * bottle or image), `CONFLICT` (name taken), `BACKEND_UNAVAILABLE` (the engine
 * does not answer), `INVALID_INPUT`.
 */
export interface Backend {
  /** `docker`, `local`, ... */
  readonly name: string;
  /** Whether this backend isolates bottles (the local one does not). */
  readonly isolates: boolean;
  /**
   * Whether mounts appear at their `target` paths inside the bottle. When false
   * (the local backend), commands see the host's `source` paths instead.
   */
  readonly mapsMounts: boolean;
  /**
   * Which engine this is, stable across its restarts and distinct from every other
   * engine (two daemons on one machine included): recorded with each bottle, so a
   * replica that takes a bottle over knows whether its containers are here.
   */
  identity?(): Promise<string>;
  /** Throw `NOT_FOUND` with the fix when the image is not available. */
  ensureImage(image: string): Promise<void>;
  /** The id an image name stands for now (undefined: not known). */
  imageId?(image: string): Promise<string | undefined>;
  /** Create a bottle (not started). Returns its id. */
  create(spec: BottleSpec): Promise<string>;
  start(id: string): Promise<void>;
  /**
   * Wait for the bottle's process to exit. Must survive a dropped connection to
   * the engine (keep asking until it answers again); with `timeoutMs`, throw
   * `TIMEOUT` past it; with `signal`, stop waiting once it aborts (`ABORTED`).
   * `NOT_FOUND` when the bottle is gone.
   */
  wait(id: string, options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<WaitResult>;
  /** Ask the process to stop, then kill it after `timeoutMs`. */
  stop(id: string, timeoutMs?: number): Promise<void>;
  /** Suspend every process of the bottle, keeping its memory. */
  freeze(id: string): Promise<void>;
  /** Resume a frozen bottle. */
  rehydrate(id: string): Promise<void>;
  /** Remove the bottle and everything the backend made for it. Idempotent. */
  destroy(id: string): Promise<void>;
  /** Bottles whose labels include all of `labels`. */
  list(labels: Record<string, string>): Promise<BottleInfo[]>;
  /** The bottle, or `undefined` when it does not exist. */
  inspect(id: string): Promise<BottleInfo | undefined>;
  /**
   * What the bottle's processes wrote to stdout and stderr; with `sinceMs` (ms
   * since the epoch), only what they wrote from then on.
   */
  logs(id: string, options?: { sinceMs?: number }): Promise<string>;
  /**
   * How many processes the bottle has, as the engine sees them from outside (a
   * paused bottle's too): never by running anything in it. Undefined where the
   * backend cannot tell.
   */
  processes?(id: string): Promise<number>;
  /** The memory the bottle's processes hold now, in bytes, as the engine counts it. */
  memoryUsage?(id: string): Promise<number | undefined>;
  /**
   * Send a signal to the bottle's process (a proxy reloads on SIGHUP). Never a
   * way into the bottle: no command is run in it.
   */
  signal?(id: string, signal: NodeJS.Signals): Promise<void>;
  /**
   * Build `tag` from a Dockerfile alone (no build context), on the engine's
   * host. `onProgress` gets the build's lines. Throws `INVALID_INPUT` with the
   * build's own words when it fails.
   */
  buildImage?(dockerfile: string, tag: string, options?: BuildImageOptions): Promise<void>;
  /** Remove the images `buildImage` made whose labels include all of `labels`. Idempotent. */
  removeImages?(labels: Record<string, string>): Promise<void>;
  /** Remove one image by its name (a tag of it only, when it has others). Idempotent. */
  removeImage?(ref: string): Promise<void>;
  /**
   * A running holder of an empty network namespace (no network, loopback only),
   * made ahead of time, for one bottle's `netns`: making the namespace is most of
   * what starting a container costs. Undefined when none is ready (the bottle
   * gets its own, as without). Each holder is handed out once; `destroy` it with
   * the bottle (it also ends by itself within minutes).
   */
  takeNetns?(): Promise<string | undefined>;
}

/** The label on an agent naming the holder whose network namespace it joined (`BottleSpec.netns`). */
export const NETNS_LABEL = LABEL.netns;

/** The label every bottle carries with the bot-bottle version that made it. */
export const VERSION_LABEL = LABEL.version;

/**
 * Every container label the host reads to decide what to stop, remove, mount or
 * trust. An engine merges an image's labels into its containers', and an image
 * may be one an agent proposed (a rebuild): a backend sets each of these on every
 * container it makes, to the spec's value or to `''` (absent), so what it reports
 * under these keys is always what the host wrote (I10).
 */
export const HOST_LABELS: readonly string[] = [
  LABEL.slug,
  LABEL.role,
  LABEL.home,
  LABEL.managedBy,
  NETNS_LABEL,
  VERSION_LABEL,
  LABEL.superviseRequest,
  'forklift.run',
];
