import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { type Access, type PolicyRule, rulesAllow } from '../access';
import { baselineViolations, restrictedViolations } from './pod-security';

/** One request the fake API server answered. */
export interface ApiCall {
  method: string;
  path: string;
  query: Record<string, string>;
  status: number;
}

type Obj = {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    labels?: Record<string, string>;
    uid?: string;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
  };
  spec?: Record<string, unknown>;
  status?: Record<string, unknown>;
  [k: string]: unknown;
};

/** Checks an object against the API's published schema; throws with what is wrong. */
export type SchemaCheck = (kind: string, obj: unknown) => void;

interface Resource {
  kind: string;
  apiVersion: string;
  /** The path's prefix and plural: `/api/v1` + `pods`. */
  group: string;
  plural: string;
}

const RESOURCES: Resource[] = [
  { kind: 'Pod', apiVersion: 'v1', group: '/api/v1', plural: 'pods' },
  { kind: 'Secret', apiVersion: 'v1', group: '/api/v1', plural: 'secrets' },
  {
    kind: 'PersistentVolumeClaim',
    apiVersion: 'v1',
    group: '/api/v1',
    plural: 'persistentvolumeclaims',
  },
  { kind: 'Service', apiVersion: 'v1', group: '/api/v1', plural: 'services' },
  {
    kind: 'NetworkPolicy',
    apiVersion: 'networking.k8s.io/v1',
    group: '/apis/networking.k8s.io/v1',
    plural: 'networkpolicies',
  },
];

/** What the fake cluster enforces beyond its schemas. */
export interface FakeClusterOptions {
  /**
   * The caller's RBAC: its Role's rules in each namespace, answered by
   * `SelfSubjectAccessReview` (and only there: other calls are not authorized).
   * Unset: the caller may do anything (a cluster admin).
   */
  access?: Record<string, PolicyRule[]>;
  /** Namespaces where Pod Security admission enforces a level on every pod made. */
  podSecurity?: Record<string, 'restricted' | 'baseline'>;
  /**
   * Plays the kubelet for pods once they run: how each ends (`exit` with its `log`),
   * or why it cannot start (`stall`, as `stallPod`); `undefined` leaves it running.
   */
  kubelet?: (pod: { namespace: string; name: string; image: string }) => PodFate | undefined;
}

/** What `FakeClusterOptions.kubelet` makes of a pod. */
export type PodFate = { exit: number; log?: string } | { stall: string; message?: string };

/** A pod's status with its only container (`main`) in `state`, as a kubelet reports it. */
const mainContainer = (phase: string, state: Record<string, unknown>) => ({
  phase,
  containerStatuses: [
    { name: 'main', ready: false, restartCount: 0, image: '', imageID: '', state },
  ],
});

/** `a=b,c=d` (equality only, what bot-bottle uses) as a predicate. */
function selects(selector: string | undefined, labels: Record<string, string> = {}): boolean {
  if (!selector) return true;
  return selector
    .split(',')
    .filter(Boolean)
    .every((term) => {
      const [k, v] = term.split('=') as [string, string | undefined];
      return v === undefined ? k in labels : labels[k] === v;
    });
}

/**
 * A Kubernetes API server double, in process, on loopback: create, read, list,
 * delete, delete a collection and watch pods, secrets, claims, services and
 * network policies in namespaces; every call recorded; every object checked
 * against the published schema before it is stored. A pod's phase moves from
 * Pending to Running on its own (there is no kubelet: `finishPod` ends one).
 * Calls into a pod (`exec`, `attach`, `portforward`) are recorded and refused.
 */
export class FakeKubernetesApi {
  readonly calls: ApiCall[] = [];
  /** What each ended pod printed. */
  readonly #logs = new WeakMap<Obj, string>();
  readonly #objects = new Map<string, Obj>();
  readonly #watchers = new Set<{
    plural: string;
    namespace: string;
    selector?: string;
    field?: string;
    send: (type: string, obj: Obj) => void;
  }>();
  #rv = 1;
  #ip = 1;
  #server!: Server;
  url = '';

  private constructor(
    readonly check: SchemaCheck | undefined,
    readonly startDelayMs: number | null,
    readonly o: FakeClusterOptions,
  ) {}

  /**
   * `startDelayMs`: how long a new pod stays Pending before it runs (and is ready);
   * `null`: pods stay Pending until `runPod` (a test that plays the kubelet).
   */
  static async start(
    options: {
      check?: SchemaCheck;
      startDelayMs?: number | null;
      /** Serve https with this key and certificate (PEM), as a real API server does. */
      tls?: { key: string; cert: string };
    } & FakeClusterOptions = {},
  ): Promise<FakeKubernetesApi> {
    const api = new FakeKubernetesApi(
      options.check,
      options.startDelayMs === undefined ? 5 : options.startDelayMs,
      options,
    );
    const handler = (req: IncomingMessage, res: ServerResponse) => {
      api.#handle(req, res).catch((err) => {
        res.writeHead(500).end(String(err));
      });
    };
    api.#server = options.tls ? createHttpsServer(options.tls, handler) : createServer(handler);
    api.#server.keepAliveTimeout = 60_000;
    await new Promise<void>((r) => api.#server.listen(0, '127.0.0.1', r));
    api.url = `${options.tls ? 'https' : 'http'}://127.0.0.1:${(api.#server.address() as AddressInfo).port}`;
    return api;
  }

  close(): Promise<void> {
    return new Promise((r) => {
      this.#server.close(() => r());
      this.#server.closeAllConnections();
    });
  }

  /** Objects of `plural` in `namespace`, as stored. */
  objects(plural: string, namespace: string): Obj[] {
    return [...this.#objects.entries()]
      .filter(([k]) => k.startsWith(`${plural}/${namespace}/`))
      .map(([, o]) => structuredClone(o));
  }

  /**
   * Store `obj` as if it had been created (checked against the schema all the
   * same), without a request: a cluster's state before a test or benchmark.
   */
  seed(plural: string, namespace: string, obj: Obj): void {
    const r = RESOURCES.find((x) => x.plural === plural);
    if (!r) throw new Error(`no resource ${plural}`);
    this.check?.(r.kind, obj);
    const stored: Obj = {
      ...structuredClone(obj),
      metadata: {
        ...obj.metadata,
        namespace,
        uid: randomUUID(),
        creationTimestamp: new Date().toISOString(),
      },
    };
    if (r.kind === 'Pod') stored.status = { phase: 'Running' };
    this.#objects.set(`${plural}/${namespace}/${obj.metadata.name}`, stored);
    stored.metadata.resourceVersion = String(++this.#rv);
  }

  /** A Pending pod runs and is ready (its readiness probe passed), as a kubelet would report it. */
  runPod(namespace: string, name: string, podIP = `10.244.0.${(this.#ip++ % 250) + 1}`): void {
    const pod = this.#objects.get(`pods/${namespace}/${name}`);
    if (!pod) throw new Error(`no pod ${namespace}/${name}`);
    if ((pod.status as { phase?: string } | undefined)?.phase !== 'Pending') return;
    pod.status = { phase: 'Running', podIP, conditions: [{ type: 'Ready', status: 'True' }] };
    this.#touch('pods', pod, 'MODIFIED');
    const image = (pod.spec as { containers?: Array<{ image?: string }> } | undefined)
      ?.containers?.[0]?.image;
    const fate = this.o.kubelet?.({ namespace, name, image: image ?? '' });
    if (fate)
      setTimeout(() => {
        if (this.#objects.get(`pods/${namespace}/${name}`) !== pod) return;
        if ('stall' in fate) this.stallPod(namespace, name, fate.stall, fate.message);
        else this.finishPod(namespace, name, fate.exit, fate.log);
      }, 5).unref();
  }

  /**
   * A Pending pod's container waits for `reason` (`ErrImagePull`, say), as a kubelet
   * reports a pod it cannot start.
   */
  stallPod(namespace: string, name: string, reason: string, message = ''): void {
    const pod = this.#objects.get(`pods/${namespace}/${name}`);
    if (!pod) throw new Error(`no pod ${namespace}/${name}`);
    pod.status = mainContainer('Pending', { waiting: { reason, message } });
    this.#touch('pods', pod, 'MODIFIED');
  }

  /**
   * End a pod's only container with `exitCode`, as a kubelet would report it;
   * `log` is what it printed (served as its `pods/log`).
   */
  finishPod(namespace: string, name: string, exitCode: number, log = ''): void {
    const pod = this.#objects.get(`pods/${namespace}/${name}`);
    if (!pod) throw new Error(`no pod ${namespace}/${name}`);
    this.#logs.set(pod, log);
    pod.status = mainContainer(exitCode === 0 ? 'Succeeded' : 'Failed', {
      terminated: { exitCode, reason: exitCode === 0 ? 'Completed' : 'Error' },
    });
    this.#touch('pods', pod, 'MODIFIED');
  }

  #touch(plural: string, obj: Obj, type: string): void {
    obj.metadata.resourceVersion = String(++this.#rv);
    for (const w of this.#watchers)
      if (
        w.plural === plural &&
        w.namespace === obj.metadata.namespace &&
        selects(w.selector, obj.metadata.labels) &&
        (!w.field || w.field === `metadata.name=${obj.metadata.name}`)
      )
        w.send(type, obj);
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', this.url);
    const query = Object.fromEntries(url.searchParams);
    const call: ApiCall = { method: req.method ?? 'GET', path: url.pathname, query, status: 0 };
    this.calls.push(call);
    const send = (status: number, body: unknown) => {
      call.status = status;
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    const status = (code: number, reason: string, message: string) =>
      send(code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, message, code });
    // Nothing bot-bottle does needs a way into a pod: refused, and on the record.
    if (/\/pods\/[^/]+\/(exec|attach|portforward)$/.test(url.pathname))
      return status(403, 'Forbidden', 'bot-bottle never runs anything in a pod');
    if (url.pathname === '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews') {
      if (req.method !== 'POST')
        return status(405, 'MethodNotAllowed', `${req.method} is not served here`);
      let body = '';
      for await (const chunk of req) body += chunk;
      let review: {
        apiVersion?: string;
        kind?: string;
        spec?: { resourceAttributes?: Partial<Access> & { namespace?: string } };
      };
      try {
        review = JSON.parse(body);
        this.check?.('SelfSubjectAccessReview', review);
      } catch (err) {
        return status(
          422,
          'Invalid',
          `SelfSubjectAccessReview is invalid: ${(err as Error).message}`,
        );
      }
      const a = review.spec?.resourceAttributes ?? {};
      const rules = this.o.access?.[a.namespace ?? ''];
      const allowed =
        !this.o.access ||
        (!!rules &&
          rulesAllow(rules, {
            verb: a.verb ?? '',
            group: a.group ?? '',
            resource: a.resource ?? '',
            ...(a.subresource ? { subresource: a.subresource } : {}),
          }));
      return send(201, {
        ...review,
        status: { allowed, ...(allowed ? { reason: 'RBAC: allowed by Role' } : {}) },
      });
    }
    const log = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/log$/.exec(url.pathname);
    if (log && req.method === 'GET') {
      const pod = this.#objects.get(`pods/${log[1]}/${log[2]}`);
      if (!pod) return status(404, 'NotFound', `pods "${log[2]}" not found`);
      call.status = 200;
      res.writeHead(200, { 'content-type': 'text/plain' }).end(this.#logs.get(pod) ?? '');
      return;
    }
    const m =
      /^(\/api\/v1|\/apis\/networking\.k8s\.io\/v1)\/namespaces\/([^/]+)\/([^/]+)(?:\/([^/]+))?$/.exec(
        url.pathname,
      );
    const resource = m && RESOURCES.find((r) => r.group === m[1] && r.plural === m[3]);
    if (!m || !resource) return status(404, 'NotFound', `no route ${req.method} ${url.pathname}`);
    const [namespace, name] = [m[2]!, m[4]];
    const key = (n: string) => `${resource.plural}/${namespace}/${n}`;
    let text = '';
    for await (const chunk of req) text += chunk;

    if (req.method === 'GET' && name) {
      const obj = this.#objects.get(key(name));
      return obj
        ? send(200, obj)
        : status(404, 'NotFound', `${resource.plural} "${name}" not found`);
    }
    if (req.method === 'GET' && query['watch'] === 'true') {
      call.status = 200;
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      const w = {
        plural: resource.plural,
        namespace,
        ...(query['labelSelector'] ? { selector: query['labelSelector'] } : {}),
        ...(query['fieldSelector'] ? { field: query['fieldSelector'] } : {}),
        send: (type: string, obj: Obj) => res.write(`${JSON.stringify({ type, object: obj })}\n`),
      };
      this.#watchers.add(w);
      // What exists now arrives first, as ADDED (a watch from no resourceVersion does that).
      for (const o of this.objects(resource.plural, namespace))
        if (
          selects(w.selector, o.metadata.labels) &&
          (!w.field || w.field === `metadata.name=${o.metadata.name}`)
        )
          w.send('ADDED', o);
      const end = () => this.#watchers.delete(w);
      req.on('close', end);
      res.on('close', end);
      return;
    }
    if (req.method === 'GET') {
      const items = this.objects(resource.plural, namespace).filter((o) =>
        selects(query['labelSelector'], o.metadata.labels),
      );
      return send(200, {
        kind: `${resource.kind}List`,
        apiVersion: resource.apiVersion,
        metadata: { resourceVersion: String(this.#rv) },
        items,
      });
    }
    if (req.method === 'POST' && !name) {
      let obj: Obj;
      try {
        obj = JSON.parse(text) as Obj;
      } catch {
        return status(400, 'BadRequest', 'the body is not JSON');
      }
      if (obj.kind !== resource.kind || obj.apiVersion !== resource.apiVersion)
        return status(400, 'BadRequest', `expected ${resource.apiVersion} ${resource.kind}`);
      try {
        this.check?.(resource.kind, obj);
      } catch (err) {
        return status(422, 'Invalid', `${resource.kind} is invalid: ${(err as Error).message}`);
      }
      const n = obj.metadata?.name;
      if (!n) return status(422, 'Invalid', 'metadata.name is required');
      const level = resource.kind === 'Pod' ? this.o.podSecurity?.[namespace] : undefined;
      if (level) {
        const refused = (level === 'restricted' ? restrictedViolations : baselineViolations)(
          (obj.spec ?? {}) as never,
        );
        if (refused.length)
          return status(
            403,
            'Forbidden',
            `pods "${n}" is forbidden: violates PodSecurity "${level}:latest": ${refused.join(', ')}`,
          );
      }
      if (this.#objects.has(key(n)))
        return status(409, 'AlreadyExists', `${resource.plural} "${n}" already exists`);
      // A dry run is admitted (or refused) as a create would be, and nothing is stored.
      if (query['dryRun'] === 'All')
        return send(201, { ...obj, metadata: { ...obj.metadata, namespace } });
      obj.metadata = {
        ...obj.metadata,
        namespace,
        uid: randomUUID(),
        creationTimestamp: new Date().toISOString(),
      };
      if (resource.kind === 'Pod') obj.status = { phase: 'Pending' };
      if (resource.kind === 'Service')
        obj.spec = {
          ...obj.spec,
          clusterIP: `10.96.${Math.floor(this.#ip / 250)}.${(this.#ip++ % 250) + 1}`,
        };
      if (resource.kind === 'PersistentVolumeClaim') obj.status = { phase: 'Bound' };
      this.#objects.set(key(n), obj);
      this.#touch(resource.plural, obj, 'ADDED');
      if (resource.kind === 'Pod' && this.startDelayMs !== null) {
        const t = setTimeout(() => {
          if (this.#objects.get(key(n)) === obj) this.runPod(namespace, n);
        }, this.startDelayMs);
        t.unref();
      }
      return send(201, obj);
    }
    if (req.method === 'DELETE') {
      const gone = name
        ? [this.#objects.get(key(name))].filter((o): o is Obj => !!o)
        : this.objects(resource.plural, namespace).filter((o) =>
            selects(query['labelSelector'], o.metadata.labels),
          );
      if (name && gone.length === 0)
        return status(404, 'NotFound', `${resource.plural} "${name}" not found`);
      for (const o of gone) {
        this.#objects.delete(key(o.metadata.name));
        this.#touch(resource.plural, o, 'DELETED');
      }
      return name
        ? send(200, gone[0])
        : send(200, { kind: `${resource.kind}List`, apiVersion: resource.apiVersion, items: gone });
    }
    return status(405, 'MethodNotAllowed', `${req.method} is not served here`);
  }
}
