// The floor of a Kubernetes launch: the same objects bot-bottle makes for a bottle,
// created bare with @kubernetes/client-node, the gate awaited with a bare watch before
// the agent's pod. Shared by the control-plane benchmark and the service-launch one's
// bare launcher (bare-launch-bin.ts).
import {
  CoreV1Api,
  type KubeConfig,
  NetworkingV1Api,
  type V1Pod,
  Watch,
} from '@kubernetes/client-node';
import { kubeConfigFor } from '../src/kubernetes-bottles';
import { type KubeBottleSpec, planBottle } from '../src/manifests';

/** A bottle's spec as the benchmarks launch it. */
export const spec = (slug: string): KubeBottleSpec => ({
  slug,
  agent: {
    image: 'bb-agents:latest',
    command: ['bb-waiter'],
    resources: { memoryBytes: 2 ** 31, cpus: 2 },
  },
  // The workspace is cloned by the gate pod's init container, as the service's are.
  gate: {
    image: 'bb-base:latest',
    command: ['node', 'bb-gate.mjs'],
    clone: { name: 'Implementer', email: 'i@example.test' },
  },
  secrets: { token: 'forge-token', 'keys.json': '{}' },
});

/**
 * The floor: the same objects, created bare with one client, each gate awaited on one
 * watch of the namespace's pods (the cheapest way to wait for many), then the agent's pod.
 */
export class BareLauncher {
  readonly #kc: KubeConfig;
  readonly #core: CoreV1Api;
  readonly #net: NetworkingV1Api;
  readonly #running = new Set<string>();
  readonly #waiting = new Map<string, () => void>();
  #watch: Promise<AbortController> | undefined;

  constructor(
    url: string,
    readonly namespace: string,
  ) {
    this.#kc = kubeConfigFor(url);
    this.#core = this.#kc.makeApiClient(CoreV1Api);
    this.#net = this.#kc.makeApiClient(NetworkingV1Api);
  }

  async launch(slug: string): Promise<void> {
    const namespace = this.namespace;
    const p = planBottle(spec(slug));
    this.#watch ??= new Watch(this.#kc).watch(
      `/api/v1/namespaces/${namespace}/pods`,
      {},
      (_t, o: V1Pod) => {
        const name = o.metadata?.name;
        if (!name || o.status?.phase !== 'Running') return;
        this.#running.add(name);
        this.#waiting.get(name)?.();
      },
      () => {},
    );
    // Not awaited: the watch answers once it has something to say, and what exists
    // when it starts arrives first.
    this.#watch.catch(() => {});
    await this.#core.createNamespacedPersistentVolumeClaim({ namespace, body: p.claim });
    await Promise.all([
      this.#net.createNamespacedNetworkPolicy({ namespace, body: p.agentPolicy }),
      this.#net.createNamespacedNetworkPolicy({ namespace, body: p.gatePolicy }),
    ]);
    await this.#core.createNamespacedService({ namespace, body: p.service });
    await this.#core.createNamespacedSecret({ namespace, body: p.secret! });
    const gate = p.gate.metadata!.name!;
    const running = new Promise<void>((resolve) => this.#waiting.set(gate, resolve));
    await this.#core.createNamespacedPod({ namespace, body: p.gate });
    if (!this.#running.has(gate)) await running;
    this.#waiting.delete(gate);
    await this.#core.createNamespacedPod({ namespace, body: p.agent });
  }

  async close(): Promise<void> {
    (await this.#watch?.catch(() => undefined))?.abort();
  }
}
