// A kubelet double on Docker, for the pods a Kubernetes backend asks the fake API
// server for: it runs each Pending pod's init containers, then its container, as
// Docker containers with the pod's command, environment, user, read-only root and
// volumes (claims and emptyDirs as host folders, a Secret as its files), reports
// the pod Running and Ready (after its TCP readiness probe passes), then
// Succeeded or Failed with its log; a pod deleted from the API is removed.
//
// What it does not do is what a cluster adds: scheduling, the pod network and its
// policies (both containers use the host's network, on a port of their own), image
// pulls. `images` maps the pods' image names to local ones, and `imageFiles` adds
// what an image would hold (bot-bottle's runtime in the gate's).
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FakeKubernetesApi } from '@bb/backend-kubernetes/testing';
import type { BottleSpec, DockerBackend } from '@bb/headless';
import { freePort } from '@bb/tooling/net';

type Env = Array<{ name: string; value: string }>;
interface Container {
  name: string;
  image: string;
  command: string[];
  env?: Env;
  workingDir?: string;
  securityContext?: { readOnlyRootFilesystem?: boolean; runAsUser?: number; runAsGroup?: number };
  volumeMounts?: Array<{ name: string; mountPath: string; subPath?: string; readOnly?: boolean }>;
  readinessProbe?: { tcpSocket?: { port: number } };
}
interface Volume {
  name: string;
  persistentVolumeClaim?: { claimName: string };
  secret?: { secretName: string; items?: Array<{ key: string; path: string }> };
  emptyDir?: { medium?: string };
}
interface Pod {
  metadata: { name: string; uid: string; labels?: Record<string, string> };
  spec: {
    securityContext?: { runAsUser?: number; runAsGroup?: number; fsGroup?: number };
    initContainers?: Container[];
    containers: Container[];
    volumes?: Volume[];
  };
  status?: { phase?: string };
}

export interface DockerKubeletOptions {
  api: FakeKubernetesApi;
  namespace: string;
  backend: DockerBackend;
  /** Local image for each image a pod names. */
  images: Record<string, string>;
  /** What an image holds beyond the local one, as read-only mounts. */
  imageFiles?: Record<string, Array<{ source: string; target: string }>>;
  /** The host folder a claim's volume is. */
  claim: (name: string) => string;
  /** The label every container it makes carries (to find them again). */
  label: string;
}

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const c = connect(port, '127.0.0.1');
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });

export class DockerKubelet {
  readonly #o: DockerKubeletOptions;
  /** Pods being run or run, by uid (a pod made again has the same name): their containers and scratch folders. */
  readonly #pods = new Map<string, { ids: string[]; dirs: string[] }>();
  /** Each bottle's gate port on the host (its Service, in a cluster). */
  readonly #gatePorts = new Map<string, number>();
  readonly #timer: NodeJS.Timeout;
  readonly errors: string[] = [];
  #busy = false;

  constructor(o: DockerKubeletOptions) {
    this.#o = o;
    this.#timer = setInterval(() => void this.#tick(), 50);
  }

  async #tick(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      const pods = this.#o.api.objects('pods', this.#o.namespace) as unknown as Pod[];
      const uids = new Set(pods.map((p) => p.metadata.uid));
      for (const [uid, run] of this.#pods)
        if (!uids.has(uid)) {
          this.#pods.delete(uid);
          await this.#remove(run);
        }
      for (const pod of pods)
        if (pod.status?.phase === 'Pending' && !this.#pods.has(pod.metadata.uid)) {
          const run = { ids: [], dirs: [] };
          this.#pods.set(pod.metadata.uid, run);
          // Each pod on its own: a gate waits for its probe while its agent starts.
          this.#run(pod, run).catch((err) =>
            this.errors.push(`${pod.metadata.name}: ${String(err)}`),
          );
        }
    } finally {
      this.#busy = false;
    }
  }

  async #remove(run: { ids: string[]; dirs: string[] }): Promise<void> {
    for (const id of run.ids) await this.#o.backend.destroy(id).catch(() => {});
    for (const d of run.dirs) rmSync(d, { recursive: true, force: true });
  }

  async #gatePort(slug: string): Promise<number> {
    let port = this.#gatePorts.get(slug);
    if (!port) {
      port = await freePort();
      this.#gatePorts.set(slug, port);
    }
    return port;
  }

  async #run(pod: Pod, run: { ids: string[]; dirs: string[] }): Promise<void> {
    const { api, namespace, backend } = this.#o;
    const name = pod.metadata.name;
    // A pod of no bottle (a probe) is labelled by its own name.
    const slug = pod.metadata.labels?.['bb.slug'] ?? name;
    const role = pod.metadata.labels?.['bb.role'] ?? 'pod';
    const sc = pod.spec.securityContext ?? {};
    const uid = sc.runAsUser ?? 0;
    const gid = sc.runAsGroup ?? 0;
    const fsGroup = sc.fsGroup ?? gid;
    const port = await this.#gatePort(slug);
    // Volumes: claims are host folders; emptyDirs and Secrets are made for the pod.
    const volumes = new Map<string, { dir: string; tmpfs?: boolean }>();
    for (const v of pod.spec.volumes ?? []) {
      if (v.persistentVolumeClaim) {
        const dir = this.#o.claim(v.persistentVolumeClaim.claimName);
        mkdirSync(dir, { recursive: true });
        volumes.set(v.name, { dir });
      } else if (v.emptyDir?.medium === 'Memory') volumes.set(v.name, { dir: '', tmpfs: true });
      else {
        const dir = mkdtempSync(join(tmpdir(), `bb-kubelet-${v.name}-`));
        run.dirs.push(dir);
        if (v.secret) {
          const secret = (
            api.objects('secrets', namespace) as unknown as Array<{
              metadata: { name: string };
              stringData?: Record<string, string>;
            }>
          ).find((s) => s.metadata.name === v.secret!.secretName);
          // Its items only, when it names them (as a kubelet projects them).
          const data = secret?.stringData ?? {};
          const files = v.secret.items
            ? v.secret.items.flatMap((i) =>
                i.key in data ? [[i.path, data[i.key]!] as const] : [],
              )
            : Object.entries(data);
          for (const [f, text] of files) {
            writeFileSync(join(dir, f), text);
            chmodSync(join(dir, f), 0o440);
            chownSync(join(dir, f), 0, fsGroup);
          }
          chmodSync(dir, 0o755);
        } else {
          chownSync(dir, uid, fsGroup);
          chmodSync(dir, v.name === 'tmp' ? 0o1777 : 0o770);
        }
        volumes.set(v.name, { dir });
      }
    }
    const specOf = (c: Container, part: string): BottleSpec => {
      // A container's own user wins over its pod's.
      const cuid = c.securityContext?.runAsUser ?? uid;
      const cgid = c.securityContext?.runAsGroup ?? gid;
      const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]));
      // The cluster's addresses, as this host has them.
      if (env['BB_GATE_PORT']) env['BB_GATE_PORT'] = String(port);
      if (env['BB_GATE']) env['BB_GATE'] = `127.0.0.1:${port}`;
      const mounts: NonNullable<BottleSpec['mounts']> = [];
      const tmpfs: Record<string, string> = {};
      for (const m of c.volumeMounts ?? []) {
        const v = volumes.get(m.name)!;
        if (v.tmpfs) {
          tmpfs[m.mountPath] = 'rw,size=64m,mode=1777';
          continue;
        }
        const source = m.subPath ? join(v.dir, m.subPath) : v.dir;
        if (m.subPath) {
          mkdirSync(source, { recursive: true });
          // A claim's folders are the pod's group's (fsGroup), as a kubelet makes them.
          if (!m.readOnly && v.dir !== this.#o.claim('bb-bottle-state'))
            chownSync(source, cuid, fsGroup);
        }
        mounts.push({ source, target: m.mountPath, ...(m.readOnly ? { readOnly: true } : {}) });
      }
      for (const f of this.#o.imageFiles?.[c.image] ?? []) mounts.push({ ...f, readOnly: true });
      return {
        name: `${name}-${part}-${Date.now().toString(36)}`,
        image: this.#o.images[c.image] ?? c.image,
        cmd: c.command,
        env,
        user: `${cuid}:${cgid}`,
        // The pod's fsGroup is every container's too, as a kubelet makes it.
        ...(fsGroup !== cgid ? { groups: [fsGroup] } : {}),
        ...(c.workingDir ? { workdir: c.workingDir } : {}),
        labels: { 'bb.slug': slug, 'bb.role': `k8s-${role}`, [this.#o.label]: '1' },
        mounts,
        tmpfs,
        network: 'host',
        readOnlyRootfs: c.securityContext?.readOnlyRootFilesystem ?? false,
        harden: true,
      };
    };
    for (const init of pod.spec.initContainers ?? []) {
      const id = await backend.create(specOf(init, init.name));
      run.ids.push(id);
      await backend.start(id);
      const done = await backend.wait(id, { timeoutMs: 60_000 });
      if (done.exitCode !== 0) {
        const log = await backend.logs(id);
        this.errors.push(`${name}: init container ${init.name} exited ${done.exitCode}: ${log}`);
        api.finishPod(namespace, name, done.exitCode, log);
        return;
      }
    }
    const main = pod.spec.containers[0]!;
    const id = await backend.create(specOf(main, 'main'));
    run.ids.push(id);
    await backend.start(id);
    if (main.readinessProbe?.tcpSocket) {
      const end = Date.now() + 30_000;
      while (!(await listening(port))) {
        if (!this.#pods.has(pod.metadata.uid)) return;
        if (Date.now() > end || (await backend.inspect(id))?.state === 'exited') {
          this.errors.push(`${name} never got ready: ${await backend.logs(id).catch(() => '')}`);
          return;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    api.runPod(namespace, name);
    const exit = await backend.wait(id).catch(() => undefined);
    if (!exit || !this.#pods.has(pod.metadata.uid)) return;
    try {
      api.finishPod(namespace, name, exit.exitCode, await backend.logs(id));
    } catch {
      // deleted meanwhile (a freeze): nothing to report
    }
  }

  /** Stop watching; remove every container it made. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    for (const run of this.#pods.values()) await this.#remove(run);
    this.#pods.clear();
  }
}
