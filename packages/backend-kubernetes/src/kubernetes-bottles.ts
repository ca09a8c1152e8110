import { BbError, isBbError } from '@bb/errors';
import { LABEL } from '@bb/names';
import {
  ApiException,
  CoreV1Api,
  KubeConfig,
  NetworkingV1Api,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node';
import { type KubeBottleSpec, names, planBottle } from './manifests';

export interface KubernetesBottlesOptions {
  /** How to reach the API server (`kubeConfigFor`, or one loaded from a file or the pod's service account). */
  kubeConfig: KubeConfig;
  /** Where bottles live. */
  namespace: string;
  /** How long a pod may take to start (scheduling, image pull). @default 120 s */
  startTimeoutMs?: number;
}

/** What the API server says of one bottle. */
export interface KubeBottleStatus {
  slug: string;
  /** The claim (workspace and home) exists: the bottle is not destroyed. */
  claim: boolean;
  gate?: string | undefined;
  agent?: string | undefined;
  /** The agent's exit code once it ended. */
  exitCode?: number | undefined;
}

/**
 * A kubeconfig for one API server URL (and a bearer token, when it needs one).
 * Plain http only to loopback (a test double or `kubectl proxy`); https is
 * verified, against `ca` (the cluster's CA certificate, PEM) when given, else
 * against the system's CAs.
 */
export function kubeConfigFor(server: string, token?: string, ca?: string): KubeConfig {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new BbError('INVALID_INPUT', `${JSON.stringify(server)} is not a Kubernetes API URL`);
  }
  const loopback = ['127.0.0.1', '[::1]', 'localhost'].includes(url.hostname);
  if (url.protocol === 'http:' && !loopback)
    throw new BbError(
      'INVALID_INPUT',
      `the Kubernetes API at ${url.host} must be reached over https (plain http only on loopback)`,
    );
  const kc = new KubeConfig();
  kc.loadFromOptions({
    // client-node refuses plain http unless told there is no TLS to verify.
    clusters: [
      {
        name: 'bb',
        server,
        skipTLSVerify: url.protocol === 'http:',
        ...(ca ? { caData: Buffer.from(ca).toString('base64') } : {}),
      },
    ],
    users: [{ name: 'bb', ...(token ? { token } : {}) }],
    contexts: [{ name: 'bb', cluster: 'bb', user: 'bb' }],
    currentContext: 'bb',
  });
  return kc;
}

const SLUG_LABEL = LABEL.slug;

/** An API error as a `BbError` that names what was being done. */
function apiError(err: unknown, what: string): BbError {
  if (isBbError(err)) return err;
  if (err instanceof ApiException) {
    const reason = (() => {
      try {
        return (JSON.parse(String(err.body)) as { message?: string }).message ?? '';
      } catch {
        return String(err.body ?? '');
      }
    })();
    const code =
      err.code === 404
        ? 'NOT_FOUND'
        : err.code === 409
          ? 'CONFLICT'
          : err.code === 400 || err.code === 422
            ? 'INVALID_INPUT'
            : err.code === 401 || err.code === 403
              ? 'UNAUTHORIZED'
              : 'BACKEND_UNAVAILABLE';
    return new BbError(code, `${what}: the Kubernetes API answered ${err.code}: ${reason}`, {
      cause: err,
    });
  }
  return new BbError(
    'BACKEND_UNAVAILABLE',
    `${what}: the Kubernetes API cannot be reached (${(err as Error).message})`,
    { cause: err },
  );
}

/**
 * Bottles on Kubernetes, each a group: a claim for its workspace and home (kept
 * while frozen), a gate pod holding the sidecars and the bottle's only Secret,
 * an agent pod with no Secret and no service account token, non-root, on a
 * read-only root with every capability dropped and seccomp's default profile,
 * and network policies letting the agent reach its gate and nothing else.
 * Freezing deletes the pods and the Secret and keeps the claim; resuming makes
 * them again (the agent's session is in its home, on the claim); destroying
 * deletes everything. It never runs anything in a pod, attaches to one or
 * forwards a port: the RBAC it ships with (deploy/) does not allow it to.
 */
export class KubernetesBottles {
  readonly name = 'kubernetes';
  readonly isolates = true;
  readonly #core: CoreV1Api;
  readonly #net: NetworkingV1Api;
  readonly #kc: KubeConfig;
  readonly #ns: string;
  readonly #startMs: number;

  constructor(options: KubernetesBottlesOptions) {
    this.#kc = options.kubeConfig;
    this.#core = options.kubeConfig.makeApiClient(CoreV1Api);
    this.#net = options.kubeConfig.makeApiClient(NetworkingV1Api);
    this.#ns = options.namespace;
    this.#startMs = options.startTimeoutMs ?? 120_000;
  }

  /**
   * Make a bottle and start its agent: the claim, the gate's Service and both
   * network policies first (no agent ever runs without its policy), then the
   * Secret and the gate, and the agent once the gate runs.
   */
  async launch(spec: KubeBottleSpec): Promise<void> {
    const namespace = this.#ns;
    const plan = planBottle(spec);
    const what = `launching bottle ${spec.slug}`;
    try {
      await this.#core.createNamespacedPersistentVolumeClaim({ namespace, body: plan.claim });
      await Promise.all([
        this.#net.createNamespacedNetworkPolicy({ namespace, body: plan.agentPolicy }),
        this.#net.createNamespacedNetworkPolicy({ namespace, body: plan.gatePolicy }),
      ]);
      const service = await this.#core.createNamespacedService({ namespace, body: plan.service });
      await this.#startPods(spec, service.spec?.clusterIP ?? '');
    } catch (err) {
      throw apiError(err, what);
    }
  }

  /**
   * Start a frozen bottle again: its Secret and pods, on the claim it kept. Its
   * network policies are made again first when they are missing (a destroy that
   * stopped half way), so no agent runs without them.
   */
  async resume(spec: KubeBottleSpec): Promise<void> {
    const namespace = this.#ns;
    const n = names(spec.slug);
    const plan = planBottle(spec);
    try {
      await this.#core.readNamespacedPersistentVolumeClaim({ name: n.claim, namespace });
      await Promise.all(
        [plan.agentPolicy, plan.gatePolicy].map((body) =>
          this.#net.createNamespacedNetworkPolicy({ namespace, body }).catch((err) => {
            if (!(err instanceof ApiException && err.code === 409)) throw err;
          }),
        ),
      );
      const service = await this.#core.readNamespacedService({ name: n.service, namespace });
      await this.#startPods(spec, service.spec?.clusterIP ?? '');
    } catch (err) {
      throw apiError(err, `resuming bottle ${spec.slug}`);
    }
  }

  async #startPods(spec: KubeBottleSpec, gateAddress: string): Promise<void> {
    const namespace = this.#ns;
    const plan = planBottle(spec, gateAddress);
    if (plan.secret) await this.#core.createNamespacedSecret({ namespace, body: plan.secret });
    await this.#core.createNamespacedPod({ namespace, body: plan.gate });
    // Ready, not just running: its port serves (its readiness probe), so the agent's first
    // call finds it.
    const gate = await this.#until(
      names(spec.slug).gate,
      (p) =>
        p.status?.phase === 'Succeeded' ||
        p.status?.phase === 'Failed' ||
        (p.status?.phase === 'Running' &&
          !!p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')),
    );
    if (gate.status?.phase !== 'Running')
      throw new BbError(
        'BACKEND_ERROR',
        `bottle ${spec.slug}'s gate ended before it was ready (exit ${exitCodeOf(gate) ?? 'unknown'}): see its pod's log`,
      );
    await this.#core.createNamespacedPod({ namespace, body: plan.agent });
  }

  /** Stop the bottle's pods and drop its Secret; the claim (workspace, home, session) stays. */
  async freeze(slug: string): Promise<void> {
    const namespace = this.#ns;
    const n = names(slug);
    try {
      await Promise.all([
        this.#gone(
          this.#core.deleteNamespacedPod({ name: n.agent, namespace, gracePeriodSeconds: 10 }),
        ),
        this.#gone(
          this.#core.deleteNamespacedPod({ name: n.gate, namespace, gracePeriodSeconds: 10 }),
        ),
        this.#gone(this.#core.deleteNamespacedSecret({ name: n.secret, namespace })),
      ]);
    } catch (err) {
      throw apiError(err, `freezing bottle ${slug}`);
    }
  }

  /**
   * Delete everything of the bottle. Idempotent. The pods go first and are
   * waited for: the network policies stay until no pod of the bottle is left (an
   * agent that ignores SIGTERM never runs without its policy).
   */
  async destroy(slug: string): Promise<void> {
    const namespace = this.#ns;
    const labelSelector = `${SLUG_LABEL}=${slug}`;
    const n = names(slug);
    try {
      await Promise.all([
        this.#core.deleteCollectionNamespacedPod({ namespace, labelSelector }),
        this.#core.deleteCollectionNamespacedSecret({ namespace, labelSelector }),
      ]);
      const end = Date.now() + this.#startMs;
      while ((await this.#core.listNamespacedPod({ namespace, labelSelector })).items.length > 0) {
        if (Date.now() > end)
          throw new BbError(
            'TIMEOUT',
            `bottle ${slug}'s pods are still there after ${this.#startMs} ms: its network policies are kept; destroy it again`,
          );
        await new Promise((r) => setTimeout(r, 500));
      }
      await Promise.all([
        this.#net.deleteCollectionNamespacedNetworkPolicy({ namespace, labelSelector }),
        this.#gone(this.#core.deleteNamespacedService({ name: n.service, namespace })),
      ]);
      await this.#core.deleteCollectionNamespacedPersistentVolumeClaim({
        namespace,
        labelSelector,
      });
    } catch (err) {
      throw apiError(err, `destroying bottle ${slug}`);
    }
  }

  /** Wait for the agent to end; its exit code. `TIMEOUT` past `timeoutMs`. */
  async waitForAgent(slug: string, timeoutMs = 3_600_000): Promise<number> {
    const pod = await this.#until(
      names(slug).agent,
      (p) => p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed',
      timeoutMs,
    );
    return exitCodeOf(pod) ?? (pod.status?.phase === 'Succeeded' ? 0 : 1);
  }

  /**
   * Stop the bottle's agent: its pod is deleted, SIGTERM first and killed after
   * `timeoutMs` (whole seconds, at least one). `waitForAgent` then ends `NOT_FOUND`.
   */
  async stopAgent(slug: string, timeoutMs = 10_000): Promise<void> {
    try {
      await this.#gone(
        this.#core.deleteNamespacedPod({
          name: names(slug).agent,
          namespace: this.#ns,
          gracePeriodSeconds: Math.max(1, Math.ceil(timeoutMs / 1000)),
        }),
      );
    } catch (err) {
      throw apiError(err, `stopping bottle ${slug}'s agent`);
    }
  }

  /** What the agent's pod printed (its log, the API server's `pods/log`); `''` when it has none. */
  async agentLogs(slug: string): Promise<string> {
    try {
      // Bounded: a turn's result is read from the end of what it printed, not from all
      // an agent can print.
      return await this.#core.readNamespacedPodLog({
        name: names(slug).agent,
        namespace: this.#ns,
        tailLines: 20_000,
        limitBytes: 16 * 1024 * 1024,
      });
    } catch (err) {
      if (err instanceof ApiException && err.code === 404) return '';
      throw apiError(err, `reading bottle ${slug}'s agent log`);
    }
  }

  /**
   * Every bottle in the namespace whose objects carry all of `labels`, from one
   * list of each kind (what a restart reconciles from).
   */
  async list(labels: Record<string, string> = {}): Promise<KubeBottleStatus[]> {
    const namespace = this.#ns;
    const labelSelector = [SLUG_LABEL, ...Object.entries(labels).map(([k, v]) => `${k}=${v}`)].join(
      ',',
    );
    try {
      const [claims, pods] = await Promise.all([
        this.#core.listNamespacedPersistentVolumeClaim({ namespace, labelSelector }),
        this.#core.listNamespacedPod({ namespace, labelSelector }),
      ]);
      const by = new Map<string, KubeBottleStatus>();
      const of = (slug: string) => {
        const s = by.get(slug) ?? { slug, claim: false };
        by.set(slug, s);
        return s;
      };
      for (const c of claims.items) of(c.metadata?.labels?.[SLUG_LABEL] ?? '').claim = true;
      for (const p of pods.items) {
        const s = of(p.metadata?.labels?.[SLUG_LABEL] ?? '');
        if (p.metadata?.labels?.[LABEL.role] === 'gate') s.gate = p.status?.phase;
        else {
          s.agent = p.status?.phase;
          s.exitCode = exitCodeOf(p);
        }
      }
      return [...by.values()].filter((s) => s.slug).sort((a, b) => a.slug.localeCompare(b.slug));
    } catch (err) {
      throw apiError(err, 'listing bottles');
    }
  }

  /** One bottle's status (`claim: false` and no pods: it does not exist). */
  async status(slug: string): Promise<KubeBottleStatus> {
    return (await this.list()).find((s) => s.slug === slug) ?? { slug, claim: false };
  }

  /** A 404 from a delete is what was wanted. */
  async #gone(p: Promise<unknown>): Promise<void> {
    try {
      await p;
    } catch (err) {
      if (!(err instanceof ApiException && err.code === 404)) throw err;
    }
  }

  /** Watch pod `name` until `done` holds; the pod then. */
  #until(name: string, done: (p: V1Pod) => boolean, timeoutMs = this.#startMs): Promise<V1Pod> {
    return new Promise<V1Pod>((resolve, reject) => {
      let abort: AbortController | undefined;
      let settled = false;
      const finish = (err: Error | undefined, pod?: V1Pod) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        abort?.abort();
        if (err) reject(err);
        else resolve(pod!);
      };
      const timer = setTimeout(
        () => finish(new BbError('TIMEOUT', `pod ${name} did not get there in ${timeoutMs} ms`)),
        timeoutMs,
      );
      new Watch(this.#kc)
        .watch(
          `/api/v1/namespaces/${this.#ns}/pods`,
          { fieldSelector: `metadata.name=${name}` },
          (type, obj: V1Pod) => {
            if (type === 'DELETED') finish(new BbError('NOT_FOUND', `pod ${name} was deleted`));
            else if (done(obj)) finish(undefined, obj);
          },
          (err) => {
            if (!settled && err && (err as Error).name !== 'AbortError')
              finish(apiError(err, `watching pod ${name}`));
          },
        )
        .then(
          (a) => {
            abort = a;
            if (settled) a.abort();
          },
          (err) => finish(apiError(err, `watching pod ${name}`)),
        );
    });
  }
}

function exitCodeOf(p: V1Pod): number | undefined {
  return p.status?.containerStatuses?.[0]?.state?.terminated?.exitCode;
}
