import { BbError } from '@bb/errors';
import { LABEL } from '@bb/names';
import type {
  V1NetworkPolicy,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Secret,
  V1Service,
} from '@kubernetes/client-node';

/** The port the gate serves the agent on (the forge sidecar, supervise, the proxies). */
export const GATE_PORT = 7070;

/**
 * Where the gate's image keeps bot-bottle's runtime (the gate, the bridge, the
 * MCP servers, the script agent): copied from it into each agent pod, read-only.
 */
export const RUNTIME_DIR = '/opt/bb/runtime';

/** A container's part of a bottle. */
export interface PartSpec {
  image: string;
  command: string[];
  env?: Record<string, string>;
  resources?: { memoryBytes?: number; cpus?: number };
}

/** One bottle as a group: an agent, its gate, the storage they share. */
export interface KubeBottleSpec {
  /** The bottle's slug: `[a-z0-9-]`, what every object of it is named after. */
  slug: string;
  /** Labels every object of the bottle carries, besides `bb.slug` and `bb.role`. */
  labels?: Record<string, string>;
  /** The agent: runs as uid 1000, no Secret, no network but its gate. */
  agent: PartSpec & { user?: { uid: number; gid: number } };
  /**
   * The gate: the sidecars, and the only holder of the bottle's secrets. With
   * `clone` (a launch), it first clones the workspace as the agent's user
   * (`<command> clone`, an init container), before any agent pod exists, with
   * `clone`'s commit identity.
   */
  gate: PartSpec & { clone?: { name: string; email: string } };
  /** Files the gate reads its secrets from (`token`, `keys.json`), mounted read-only into it alone. */
  secrets?: Record<string, string>;
  /** The claim for the workspace and home. @default 10 GiB */
  storageBytes?: number;
  /**
   * A ReadWriteMany claim the orchestrator shares with every gate: the gate
   * writes its queue and op log in `<slug>/queue` and `<slug>/state` of it, where
   * the orchestrator reads them. Absent: they stay on the bottle's own claim.
   */
  stateClaim?: string;
  /**
   * What else the gate reads on the shared claim (with `stateClaim`): the proxies'
   * files (`<slug>/proxy`, read-only: a reload rewrites them there), and the supervise
   * exchange (`<slug>/supervise`) with the bottle's current configuration
   * (`<slug>/current-config`, read-only).
   */
  shared?: { proxy?: boolean; supervise?: boolean };
  storageClassName?: string;
}

/** Everything one bottle is made of on the API server. */
export interface BottleObjects {
  claim: V1PersistentVolumeClaim;
  secret: V1Secret | undefined;
  service: V1Service;
  agentPolicy: V1NetworkPolicy;
  gatePolicy: V1NetworkPolicy;
  gate: V1Pod;
  agent: V1Pod;
}

const SLUG = /^[a-z0-9]([a-z0-9-]{0,45}[a-z0-9])?$/;
const CLAIM = /^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$/;

/** The name of each object of bottle `slug`. */
export const names = (slug: string) => ({
  claim: `bb-${slug}-data`,
  secret: `bb-${slug}-gate`,
  service: `bb-${slug}-gate`,
  agentPolicy: `bb-${slug}-agent`,
  gatePolicy: `bb-${slug}-gate`,
  gate: `bb-${slug}-gate`,
  agent: `bb-${slug}-agent`,
});

const limits = (r: PartSpec['resources']) => {
  const out: Record<string, string> = {};
  if (r?.memoryBytes) out['memory'] = String(r.memoryBytes);
  if (r?.cpus) out['cpu'] = `${Math.round(r.cpus * 1000)}m`;
  return Object.keys(out).length ? { limits: out, requests: out } : undefined;
};

const envList = (env: Record<string, string> = {}) =>
  Object.entries(env).map(([name, value]) => ({ name, value }));

/**
 * The objects of one bottle, as plain API objects (the caller creates them).
 * `gateAddress` is the gate Service's cluster IP when known (the agent is given
 * it, so it needs no DNS, which its policy does not allow).
 */
export function planBottle(spec: KubeBottleSpec, gateAddress = ''): BottleObjects {
  if (!SLUG.test(spec.slug))
    throw new BbError(
      'INVALID_INPUT',
      `bottle slug ${JSON.stringify(spec.slug)} must be lower-case letters, digits and dashes (47 at most)`,
    );
  if (spec.stateClaim !== undefined && !CLAIM.test(spec.stateClaim))
    throw new BbError(
      'INVALID_INPUT',
      `state claim ${JSON.stringify(spec.stateClaim)} is not a claim name: lower-case letters, digits, dots and dashes`,
    );
  const n = names(spec.slug);
  const base = { ...spec.labels, [LABEL.slug]: spec.slug };
  const meta = (name: string, role: string) => ({ name, labels: { ...base, [LABEL.role]: role } });
  const user = spec.agent.user ?? { uid: 1000, gid: 1000 };
  if (user.uid === 0)
    throw new BbError('INVALID_INPUT', 'the agent never runs as root (uid 0): give another uid');
  const hardened = {
    allowPrivilegeEscalation: false,
    capabilities: { drop: ['ALL'] },
    readOnlyRootFilesystem: true,
  };
  const claim: V1PersistentVolumeClaim = {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: meta(n.claim, 'data'),
    spec: {
      accessModes: ['ReadWriteOnce'],
      resources: { requests: { storage: String(spec.storageBytes ?? 10 * 1024 ** 3) } },
      ...(spec.storageClassName ? { storageClassName: spec.storageClassName } : {}),
    },
  };
  const secret: V1Secret | undefined = spec.secrets
    ? {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: meta(n.secret, 'gate'),
        type: 'Opaque',
        stringData: spec.secrets,
      }
    : undefined;
  const service: V1Service = {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(n.service, 'gate'),
    spec: {
      selector: { [LABEL.slug]: spec.slug, [LABEL.role]: 'gate' },
      ports: [{ name: 'gate', port: GATE_PORT, targetPort: GATE_PORT, protocol: 'TCP' }],
    },
  };
  const agentSelector = { matchLabels: { [LABEL.slug]: spec.slug, [LABEL.role]: 'agent' } };
  const gateSelector = { matchLabels: { [LABEL.slug]: spec.slug, [LABEL.role]: 'gate' } };
  // The agent reaches its gate's port and nothing else; nothing reaches the agent.
  const agentPolicy: V1NetworkPolicy = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: meta(n.agentPolicy, 'agent'),
    spec: {
      podSelector: agentSelector,
      policyTypes: ['Ingress', 'Egress'],
      ingress: [],
      egress: [
        { to: [{ podSelector: gateSelector }], ports: [{ protocol: 'TCP', port: GATE_PORT }] },
      ],
    },
  };
  // The gate is reached by its agent alone; it reaches the forge and the model APIs
  // itself (egress open: a namespace's default-deny policy would otherwise stop it).
  const gatePolicy: V1NetworkPolicy = {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: meta(n.gatePolicy, 'gate'),
    spec: {
      podSelector: gateSelector,
      policyTypes: ['Ingress', 'Egress'],
      ingress: [
        { _from: [{ podSelector: agentSelector }], ports: [{ protocol: 'TCP', port: GATE_PORT }] },
      ],
      egress: [{}],
    },
  };
  const data = { name: 'data', persistentVolumeClaim: { claimName: n.claim } };
  const gate: V1Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: meta(n.gate, 'gate'),
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      terminationGracePeriodSeconds: 10,
      // Its group owns the Secret's files (0440) and the claim's state directory.
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 1001,
        runAsGroup: 1001,
        fsGroup: 1001,
        // The claim holds the agent's files: its group is changed only when its root's is
        // not already (not walked through at every start).
        fsGroupChangePolicy: 'OnRootMismatch',
        seccompProfile: { type: 'RuntimeDefault' },
      },
      ...(spec.gate.clone
        ? {
            initContainers: [
              {
                name: 'workspace',
                image: spec.gate.image,
                command: [...spec.gate.command, 'clone'],
                env: envList({
                  ...spec.gate.env,
                  BB_GIT_NAME: spec.gate.clone.name,
                  BB_GIT_EMAIL: spec.gate.clone.email,
                }),
                // The agent's user: the checkout is its own.
                securityContext: { ...hardened, runAsUser: user.uid, runAsGroup: user.gid },
                resources: limits({ memoryBytes: 1024 ** 3, cpus: 1 }),
                volumeMounts: [
                  { name: 'data', mountPath: '/workspace', subPath: 'workspace' },
                  // The token alone (the model keys are none of the clone's business).
                  ...(secret
                    ? [{ name: 'clone-secret', mountPath: '/run/bb-secrets', readOnly: true }]
                    : []),
                  { name: 'tmp', mountPath: '/tmp' },
                ],
              },
            ],
          }
        : {}),
      containers: [
        {
          name: 'main',
          image: spec.gate.image,
          command: spec.gate.command,
          env: envList({ ...spec.gate.env, BB_GATE_PORT: String(GATE_PORT) }),
          ports: [{ containerPort: GATE_PORT, name: 'gate', protocol: 'TCP' }],
          // Ready once it serves its port: the agent starts only then.
          readinessProbe: {
            tcpSocket: { port: GATE_PORT },
            periodSeconds: 1,
            failureThreshold: 120,
          },
          securityContext: hardened,
          resources: limits(spec.gate.resources),
          volumeMounts: [
            // The agent's work, read as data; the gate's own state (op log, push repository)
            // and queue where the orchestrator reads them (its bottle's folder of the shared
            // claim), else beside the work.
            { name: 'data', mountPath: '/workspace', subPath: 'workspace', readOnly: true },
            ...(spec.stateClaim
              ? [
                  { name: 'shared', mountPath: '/state', subPath: `${spec.slug}/state` },
                  { name: 'shared', mountPath: '/queue', subPath: `${spec.slug}/queue` },
                  ...(spec.shared?.proxy
                    ? [
                        {
                          name: 'shared',
                          mountPath: '/proxy',
                          subPath: `${spec.slug}/proxy`,
                          readOnly: true,
                        },
                      ]
                    : []),
                  ...(spec.shared?.supervise
                    ? [
                        {
                          name: 'shared',
                          mountPath: '/supervise',
                          subPath: `${spec.slug}/supervise`,
                        },
                        {
                          name: 'shared',
                          mountPath: '/etc/bot-bottle/current-config',
                          subPath: `${spec.slug}/current-config`,
                          readOnly: true,
                        },
                      ]
                    : []),
                ]
              : [
                  { name: 'data', mountPath: '/state', subPath: 'state' },
                  { name: 'data', mountPath: '/queue', subPath: 'queue' },
                ]),
            ...(secret ? [{ name: 'secrets', mountPath: '/run/bb-secrets', readOnly: true }] : []),
            { name: 'tmp', mountPath: '/tmp' },
          ],
        },
      ],
      volumes: [
        data,
        ...(spec.stateClaim
          ? [{ name: 'shared', persistentVolumeClaim: { claimName: spec.stateClaim } }]
          : []),
        ...(secret
          ? [{ name: 'secrets', secret: { secretName: n.secret, defaultMode: 0o440 } }]
          : []),
        ...(secret && spec.gate.clone
          ? [
              {
                name: 'clone-secret',
                secret: {
                  secretName: n.secret,
                  defaultMode: 0o440,
                  items: [{ key: 'token', path: 'token' }],
                },
              },
            ]
          : []),
        { name: 'tmp', emptyDir: { medium: 'Memory', sizeLimit: '64Mi' } },
      ],
    },
  };
  const agent: V1Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: meta(n.agent, 'agent'),
    spec: {
      restartPolicy: 'Never',
      // No Secret, no service account token, no service links: nothing to steal.
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      shareProcessNamespace: false,
      // Stopped soon: an agent that ignores SIGTERM is killed within seconds.
      terminationGracePeriodSeconds: 5,
      hostNetwork: false,
      hostPID: false,
      hostIPC: false,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: user.uid,
        runAsGroup: user.gid,
        fsGroup: user.gid,
        fsGroupChangePolicy: 'OnRootMismatch',
        seccompProfile: { type: 'RuntimeDefault' },
      },
      // A ReadWriteOnce claim is shared with the gate on the gate's node.
      affinity: {
        podAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: [
            { labelSelector: gateSelector, topologyKey: 'kubernetes.io/hostname' },
          ],
        },
      },
      // bot-bottle's runtime, from the gate's image (the agent's image need not carry it).
      initContainers: [
        {
          name: 'runtime',
          image: spec.gate.image,
          command: ['cp', '-R', `${RUNTIME_DIR}/.`, '/runtime/'],
          securityContext: hardened,
          resources: limits({ memoryBytes: 64 * 1024 ** 2, cpus: 0.5 }),
          volumeMounts: [{ name: 'runtime', mountPath: '/runtime' }],
        },
      ],
      containers: [
        {
          name: 'main',
          image: spec.agent.image,
          command: spec.agent.command,
          workingDir: '/workspace',
          env: envList({
            ...spec.agent.env,
            BB_GATE: gateAddress ? `${gateAddress}:${GATE_PORT}` : `${n.service}:${GATE_PORT}`,
          }),
          securityContext: hardened,
          resources: limits(spec.agent.resources),
          volumeMounts: [
            { name: 'data', mountPath: '/workspace', subPath: 'workspace' },
            { name: 'data', mountPath: '/home/agent', subPath: 'home' },
            { name: 'tmp', mountPath: '/tmp' },
            { name: 'runtime', mountPath: RUNTIME_DIR, readOnly: true },
          ],
        },
      ],
      volumes: [
        data,
        { name: 'tmp', emptyDir: { sizeLimit: '1Gi' } },
        { name: 'runtime', emptyDir: { sizeLimit: '256Mi' } },
      ],
    },
  };
  return { claim, secret, service, agentPolicy, gatePolicy, gate, agent };
}
