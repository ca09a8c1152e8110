import { randomBytes } from 'node:crypto';
import { errorMessage } from '@bb/errors';
import {
  ApiException,
  AuthorizationV1Api,
  CoreV1Api,
  type KubeConfig,
  type V1Pod,
} from '@kubernetes/client-node';
import { type Access, describeAccess, ORCHESTRATOR_ACCESS, ORCHESTRATOR_FORBIDDEN } from './access';
import { RUNTIME_DIR } from './manifests';

/** One finding of `clusterChecks`: `ok: null` when it could not be told (with why). */
export interface ClusterCheck {
  check: string;
  ok: boolean | null;
  detail: string;
  fix?: string;
}

export interface ClusterCheckOptions {
  kubeConfig: KubeConfig;
  /** The bottles' namespace. */
  namespace: string;
  /** The gate's image (`BB_K8S_GATE_IMAGE`). */
  gateImage: string;
  /** The agents' images (the bottle manifests'), each run once to see it starts `node`. */
  agentImages?: readonly string[];
  /**
   * What the network probe tries to reach, `host:port`: a pod no policy allows must
   * not get there. Default: the API server's own service address, which the
   * kubelet gives every pod (`KUBERNETES_SERVICE_HOST`), reachable unless a policy
   * is enforced.
   */
  probeTarget?: string;
  /** How long a probe pod may take, its image pull included. @default 120 s */
  timeoutMs?: number;
}

const PROBE_LABEL = 'bb.doctor';
const IMAGE_FAILURES = new Set([
  'ErrImagePull',
  'ImagePullBackOff',
  'InvalidImageName',
  'ErrImageNeverPull',
  'CreateContainerError',
  'CreateContainerConfigError',
]);

/**
 * Run by the gate's image in a pod of the bottles' namespace that no policy allows
 * anything: the runtime must be there, and a connection to the target must fail.
 * Exit 0 blocked (a timeout, or the network refusing to route), 2 reached, 3 no
 * runtime, 4 no target, 5 inconclusive (a refused connection reached a host: point the
 * probe at a port that listens).
 */
export const NETWORK_PROBE = `
const fs = require('node:fs'), net = require('node:net');
const rt = process.env.BB_PROBE_RUNTIME;
if (rt) { if (!fs.existsSync(rt + '/bb-gate.mjs')) { console.log('RUNTIME missing ' + rt); process.exit(3); } console.log('RUNTIME ok'); }
const host = process.env.BB_PROBE_HOST || process.env.KUBERNETES_SERVICE_HOST;
const port = Number(process.env.BB_PROBE_PORT || process.env.KUBERNETES_SERVICE_PORT || 443);
if (!host) { console.log('NOTARGET'); process.exit(4); }
const s = net.connect({ host, port, timeout: 3000 });
s.on('connect', () => { console.log('REACHED ' + host + ':' + port); process.exit(2); });
const where = host + ':' + port;
s.on('timeout', () => { console.log('BLOCKED ' + where + ' timeout'); process.exit(0); });
s.on('error', (e) => {
  const dropped = ['EHOSTUNREACH', 'ENETUNREACH', 'EPERM', 'EACCES', 'ETIMEDOUT'].includes(e.code);
  console.log((dropped ? 'BLOCKED ' : 'INCONCLUSIVE ') + where + ' ' + (e.code || e.message));
  process.exit(dropped ? 0 : 5);
});
`;

/** A pod Pod Security "restricted" admits: no root, nothing added, no way out of its sandbox. */
function probePod(name: string, image: string, script: string, env: Record<string, string>): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { [PROBE_LABEL]: 'probe' } },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      securityContext: {
        runAsNonRoot: true,
        runAsUser: 1000,
        runAsGroup: 1000,
        seccompProfile: { type: 'RuntimeDefault' },
      },
      containers: [
        {
          name: 'main',
          image,
          command: ['node', '-e', script],
          env: Object.entries(env).map(([n, value]) => ({ name: n, value })),
          resources: {
            limits: { memory: '128Mi', cpu: '250m' },
            requests: { memory: '128Mi', cpu: '250m' },
          },
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            capabilities: { drop: ['ALL'] },
          },
        },
      ],
    },
  };
}

/** What an API error says, from its Status body when it has one. */
function apiMessage(err: unknown): string {
  if (err instanceof ApiException) {
    try {
      return (JSON.parse(String(err.body)) as { message?: string }).message ?? `HTTP ${err.code}`;
    } catch {
      return `HTTP ${err.code}: ${String(err.body ?? '')}`;
    }
  }
  return errorMessage(err);
}

async function accessCheck(o: ClusterCheckOptions): Promise<ClusterCheck> {
  const authz = o.kubeConfig.makeApiClient(AuthorizationV1Api);
  const allowed = async (a: Access) => {
    const review = await authz.createSelfSubjectAccessReview({
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SelfSubjectAccessReview',
        spec: {
          resourceAttributes: {
            namespace: o.namespace,
            verb: a.verb,
            group: a.group,
            resource: a.resource,
            ...(a.subresource ? { subresource: a.subresource } : {}),
          },
        },
      },
    });
    return review.status?.allowed === true;
  };
  try {
    const [needed, forbidden] = await Promise.all([
      Promise.all(ORCHESTRATOR_ACCESS.map(async (a) => ((await allowed(a)) ? null : a))),
      Promise.all(ORCHESTRATOR_FORBIDDEN.map(async (a) => ((await allowed(a)) ? a : null))),
    ]);
    const missing = needed.filter((a): a is Access => a !== null);
    const extra = forbidden.filter((a): a is Access => a !== null);
    if (!missing.length && !extra.length)
      return {
        check: 'kubernetes access',
        ok: true,
        detail: `in ${o.namespace}: all ${ORCHESTRATOR_ACCESS.length} of what bottles need, and none of the ${ORCHESTRATOR_FORBIDDEN.length} forbidden (exec, attach, port-forward, proxy, ephemeral containers, reading Secrets, making Roles). Making pods there is still a way to any Secret of that namespace: keep only bottles' own in it`,
      };
    return {
      check: 'kubernetes access',
      ok: false,
      detail: [
        missing.length
          ? `not allowed in ${o.namespace}: ${missing.map(describeAccess).join(', ')}`
          : '',
        extra.length
          ? `allowed in ${o.namespace} and must not be: ${extra.map(describeAccess).join(', ')}`
          : '',
      ]
        .filter(Boolean)
        .join('; '),
      fix: 'bind this identity to the Role of deploy/rbac.yaml alone (kubectl apply -k packages/backend-kubernetes/deploy), and remove any other binding that grants it more',
    };
  } catch (err) {
    return {
      check: 'kubernetes access',
      ok: false,
      detail: `the API server would not review access: ${apiMessage(err)}`,
      fix: 'check BB_K8S_API, BB_K8S_TOKEN_FILE and BB_K8S_CA (or the pod service account), docs/guides/kubernetes.md',
    };
  }
}

/**
 * A pod "baseline" admits and "restricted" refuses (root allowed, privilege escalation
 * not ruled out, no capability dropped, no seccomp profile), asked for as a dry run:
 * the bottles' namespace must refuse it as "restricted".
 */
async function podSecurityCheck(o: ClusterCheckOptions, core: CoreV1Api): Promise<ClusterCheck> {
  const name = `bb-doctor-${randomBytes(3).toString('hex')}-loose`;
  const body: V1Pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { [PROBE_LABEL]: 'dry-run' } },
    spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: o.gateImage }] },
  };
  try {
    await core.createNamespacedPod({ namespace: o.namespace, body, dryRun: 'All' });
  } catch (err) {
    const message = apiMessage(err);
    if (err instanceof ApiException && err.code === 403 && /PodSecurity "restricted/.test(message))
      return {
        check: 'pod security',
        ok: true,
        detail: `${o.namespace} enforces "restricted": a pod that runs as root is refused (${message.slice(0, 160)})`,
      };
    if (err instanceof ApiException && err.code === 403 && /PodSecurity/.test(message))
      return {
        check: 'pod security',
        ok: false,
        detail: `${o.namespace} enforces a looser level than "restricted": ${message.slice(0, 200)}`,
        fix: `kubectl label --overwrite namespace ${o.namespace} pod-security.kubernetes.io/enforce=restricted (deploy/namespaces.yaml does)`,
      };
    return {
      check: 'pod security',
      ok: false,
      detail: `a dry run of a pod failed for another reason: ${message}`,
      fix: 'check the access above; the dry run needs create on pods',
    };
  }
  return {
    check: 'pod security',
    ok: false,
    detail: `${o.namespace} admits a pod that may run as root with every default capability (dry run, nothing was made): Pod Security "restricted" is not enforced there`,
    fix: `label it: kubectl label namespace ${o.namespace} pod-security.kubernetes.io/enforce=restricted (deploy/namespaces.yaml does)`,
  };
}

interface PodEnd {
  exitCode?: number;
  log: string;
  /** Why it never ran (an image that cannot be pulled, say). */
  stuck?: string;
}

/** Make `pod`, wait for its end (or for a reason it will never start), read its log, delete it. */
async function runPod(o: ClusterCheckOptions, core: CoreV1Api, pod: V1Pod): Promise<PodEnd> {
  const name = pod.metadata!.name!;
  const { namespace } = o;
  const deadline = Date.now() + (o.timeoutMs ?? 120_000);
  try {
    await core.createNamespacedPod({ namespace, body: pod });
    for (;;) {
      const now = await core.readNamespacedPod({ name, namespace });
      const status = now.status?.containerStatuses?.[0];
      const waiting = status?.state?.waiting?.reason;
      if (waiting && IMAGE_FAILURES.has(waiting))
        return {
          log: '',
          stuck: `${waiting}${status?.state?.waiting?.message ? `: ${status.state.waiting.message}` : ''}`,
        };
      if (now.status?.phase === 'Succeeded' || now.status?.phase === 'Failed') {
        const log = await core.readNamespacedPodLog({ name, namespace }).catch(() => '');
        return {
          exitCode:
            status?.state?.terminated?.exitCode ?? (now.status.phase === 'Succeeded' ? 0 : 1),
          log: String(log),
        };
      }
      if (Date.now() > deadline)
        return {
          log: '',
          stuck: `did not end in ${Math.round((o.timeoutMs ?? 120_000) / 1000)} s (phase ${now.status?.phase ?? 'unknown'}${waiting ? `, ${waiting}` : ''})`,
        };
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    await core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 }).catch(() => {});
  }
}

/** The gate's image runs in the bottles' namespace, holds the runtime, and the network probe is blocked. */
async function gateProbe(o: ClusterCheckOptions, core: CoreV1Api): Promise<ClusterCheck[]> {
  const env: Record<string, string> = { BB_PROBE_RUNTIME: RUNTIME_DIR };
  if (o.probeTarget) {
    const m = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(o.probeTarget);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65535)
      return [
        {
          check: 'network policy',
          ok: false,
          detail: `BB_K8S_PROBE_TARGET ${JSON.stringify(o.probeTarget)} is not host:port`,
          fix: 'set it to an address pods could reach without a policy, e.g. 10.96.0.1:443',
        },
      ];
    env['BB_PROBE_HOST'] = m[1]!;
    env['BB_PROBE_PORT'] = m[2]!;
  }
  let end: PodEnd;
  try {
    end = await runPod(
      o,
      core,
      probePod(
        `bb-doctor-${randomBytes(3).toString('hex')}-network`,
        o.gateImage,
        NETWORK_PROBE,
        env,
      ),
    );
  } catch (err) {
    const detail = `the probe pod could not be made: ${apiMessage(err)}`;
    return [
      { check: 'gate image', ok: null, detail },
      { check: 'network policy', ok: null, detail },
    ];
  }
  const line = (p: string) => end.log.split('\n').find((l) => l.startsWith(p));
  const image: ClusterCheck = end.stuck
    ? {
        check: 'gate image',
        ok: false,
        detail: `${o.gateImage} did not run: ${end.stuck}`,
        fix: 'build it (sh scripts/build-k8s-images.sh), push it where the cluster pulls, and set BB_K8S_GATE_IMAGE to it',
      }
    : line('RUNTIME ok')
      ? {
          check: 'gate image',
          ok: true,
          detail: `${o.gateImage} runs and holds the runtime at ${RUNTIME_DIR}`,
        }
      : {
          check: 'gate image',
          ok: false,
          detail: `${o.gateImage} ran but ${line('RUNTIME missing') ? `has no bot-bottle runtime at ${RUNTIME_DIR}` : `printed no answer (exit ${end.exitCode}: ${end.log.trim().slice(0, 200) || 'no output'})`}`,
          fix: 'build it with sh scripts/build-k8s-images.sh (it must have node and the runtime)',
        };
  if (image.ok !== true)
    return [
      image,
      {
        check: 'network policy',
        ok: null,
        detail: 'not probed: the gate image did not run the probe',
      },
    ];
  const blocked = line('BLOCKED');
  const reached = line('REACHED');
  const unsure = line('INCONCLUSIVE');
  const network: ClusterCheck = unsure
    ? {
        check: 'network policy',
        ok: null,
        detail: `cannot be told: the probe's connection to ${unsure.split(' ')[1]} was answered (${unsure.split(' ')[2] ?? 'refused'}), not dropped: nothing listens there`,
        fix: 'set BB_K8S_PROBE_TARGET to host:port of something that listens and that pods reach without a policy',
      }
    : blocked
      ? {
          check: 'network policy',
          ok: true,
          detail: `a pod no policy allows was kept from ${blocked.slice(8)}`,
        }
      : reached
        ? {
            check: 'network policy',
            ok: false,
            detail: `a pod no policy allows reached ${reached.slice(8)}: network policies are not enforced in ${o.namespace}`,
            fix: 'use a CNI that enforces NetworkPolicy (Calico, Cilium), and apply deploy/namespaces.yaml (its default-deny policy); until then an agent reaches anything its node does',
          }
        : {
            check: 'network policy',
            ok: false,
            detail: `the probe gave no answer (exit ${end.exitCode}: ${end.log.trim().slice(0, 200) || 'no output'})`,
            fix: line('NOTARGET')
              ? 'set BB_K8S_PROBE_TARGET to host:port of something pods reach without a policy'
              : 'see the probe pod output above',
          };
  return [image, network];
}

async function agentImageCheck(
  o: ClusterCheckOptions,
  core: CoreV1Api,
  image: string,
): Promise<ClusterCheck> {
  const check = `agent image ${image}`;
  let end: PodEnd;
  try {
    end = await runPod(
      o,
      core,
      probePod(
        `bb-doctor-${randomBytes(3).toString('hex')}-agent`,
        image,
        "console.log('NODE ' + process.version)",
        {},
      ),
    );
  } catch (err) {
    return { check, ok: null, detail: `the probe pod could not be made: ${apiMessage(err)}` };
  }
  if (!end.stuck && end.exitCode === 0 && /^NODE v\d+/m.test(end.log))
    return {
      check,
      ok: true,
      detail: `runs node ${/^NODE (v\S+)/m.exec(end.log)![1]} as uid 1000`,
    };
  return {
    check,
    ok: false,
    detail: end.stuck
      ? `did not run: ${end.stuck}`
      : `did not run node (exit ${end.exitCode}: ${end.log.trim().slice(0, 200) || 'no output'})`,
    fix: 'an agent image needs node on PATH (the bridge runs in it) and must be pullable by the cluster: sh scripts/build-agents-image.sh, then push it',
  };
}

/**
 * What a real cluster must give bottles, checked from the orchestrator's own identity
 * (run it in the orchestrator's pod, or with its token): the access of
 * `deploy/rbac.yaml` and nothing more, Pod Security "restricted" enforced in the
 * bottles' namespace (a dry run of a privileged pod is refused), network policies
 * enforced (a probe pod no policy allows cannot connect out), and the gate's and
 * agents' images pullable and runnable as bottles run them. Probe pods are deleted
 * whatever happens. Never throws.
 */
export async function clusterChecks(o: ClusterCheckOptions): Promise<ClusterCheck[]> {
  const core = o.kubeConfig.makeApiClient(CoreV1Api);
  // What an earlier run left (stopped mid-probe): gone before this one starts.
  await core
    .deleteCollectionNamespacedPod({ namespace: o.namespace, labelSelector: PROBE_LABEL })
    .catch(() => {});
  const [access, security, gate, ...agents] = await Promise.all([
    accessCheck(o),
    podSecurityCheck(o, core),
    gateProbe(o, core),
    ...[...new Set(o.agentImages ?? [])].map((i) => agentImageCheck(o, core, i)),
  ]);
  return [access, security, ...gate, ...agents];
}
