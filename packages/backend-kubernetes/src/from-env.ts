import { readFileSync } from 'node:fs';
import { BbError } from '@bb/errors';
import type { BottleRunner, RunnerOptions } from '@bb/headless';
import { KubeConfig } from '@kubernetes/client-node';
import { type ClusterCheck, clusterChecks } from './doctor';
import { KubernetesBottles, kubeConfigFor } from './kubernetes-bottles';
import { kubernetesRunner } from './runner';

/** The namespace bottles go in unless `BB_K8S_NAMESPACE` says another (deploy/namespaces.yaml's). */
export const DEFAULT_NAMESPACE = 'bot-bottle-bottles';

/**
 * The orchestrator's Kubernetes runner, configured from its environment:
 *
 * - `BB_K8S_GATE_IMAGE` (required): the gate's image;
 * - `BB_K8S_STATE_CLAIM` (required): the ReadWriteMany claim, in the bottles'
 *   namespace, whose root the orchestrator has mounted at `$BB_HOME/bottles`;
 * - `BB_K8S_NAMESPACE`: where bottles go (default `bot-bottle-bottles`);
 * - `BB_K8S_API`: the API server's URL (default: the cluster the orchestrator's
 *   pod runs in, with its service account), with `BB_K8S_TOKEN_FILE` for a
 *   bearer token and `BB_K8S_CA` for the file of the CA certificate (PEM) its
 *   https is verified against (default: the system's CAs).
 *
 * Every problem is named at once (`INVALID_INPUT`), before anything is made.
 */
export function kubernetesRunnerFromEnv(
  o: RunnerOptions,
): BottleRunner & { readonly isolates: true } {
  const env = o.env;
  const problems: string[] = [];
  const gateImage = env['BB_K8S_GATE_IMAGE']?.trim();
  if (!gateImage)
    problems.push(
      'BB_K8S_GATE_IMAGE must name the gate image the cluster pulls (bot-bottle runtime and sidecars)',
    );
  const stateClaim = env['BB_K8S_STATE_CLAIM']?.trim();
  if (!stateClaim)
    problems.push(
      'BB_K8S_STATE_CLAIM must name the ReadWriteMany claim mounted at $BB_HOME/bottles (docs/guides/kubernetes.md)',
    );
  const namespace = env['BB_K8S_NAMESPACE']?.trim() || DEFAULT_NAMESPACE;
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(namespace))
    problems.push(`BB_K8S_NAMESPACE ${JSON.stringify(namespace)} is not a namespace name`);
  let kubeConfig: KubeConfig | undefined;
  try {
    kubeConfig = kubeConfigOf(env);
  } catch (err) {
    problems.push((err as Error).message);
  }
  if (problems.length > 0 || !kubeConfig || !gateImage || !stateClaim)
    throw new BbError(
      'INVALID_INPUT',
      `the kubernetes backend's configuration is invalid:\n${problems.map((p) => `- ${p}`).join('\n')}`,
    );
  if (o.warmMs > 0)
    o.warn?.(
      'the kubernetes backend keeps no bottle warm (its pods go at each freeze): BB_WARM_WINDOW is not used',
    );
  return kubernetesRunner({
    bottles: new KubernetesBottles({ kubeConfig, namespace }),
    env,
    token: o.token,
    credentials: o.credentials,
    gateImage,
    stateClaim,
  });
}

/**
 * `clusterChecks` for the cluster this environment names (the runner's variables, and
 * `BB_K8S_PROBE_TARGET`, `host:port`, for the network probe). A configuration that is
 * invalid is one failed check naming every problem.
 */
export async function clusterChecksFromEnv(
  env: Record<string, string | undefined>,
  agentImages: readonly string[] = [],
): Promise<ClusterCheck[]> {
  let kubeConfig: KubeConfig;
  try {
    kubeConfig = kubeConfigOf(env);
  } catch (err) {
    return [
      {
        check: 'kubernetes access',
        ok: false,
        detail: (err as Error).message,
        fix: 'docs/guides/kubernetes.md says what to set',
      },
    ];
  }
  const gateImage = env['BB_K8S_GATE_IMAGE']?.trim();
  if (!gateImage)
    return [
      {
        check: 'gate image',
        ok: false,
        detail: 'BB_K8S_GATE_IMAGE is not set',
        fix: 'build it (sh scripts/build-k8s-images.sh), push it, and set BB_K8S_GATE_IMAGE to its name',
      },
    ];
  const probeTarget = env['BB_K8S_PROBE_TARGET']?.trim();
  return clusterChecks({
    kubeConfig,
    namespace: env['BB_K8S_NAMESPACE']?.trim() || DEFAULT_NAMESPACE,
    gateImage,
    agentImages,
    ...(probeTarget ? { probeTarget } : {}),
  });
}

function kubeConfigOf(env: Record<string, string | undefined>): KubeConfig {
  const api = env['BB_K8S_API']?.trim();
  if (api) {
    const file = env['BB_K8S_TOKEN_FILE']?.trim();
    let token: string | undefined;
    if (file) {
      try {
        token = readFileSync(file, 'utf8').trim();
      } catch (err) {
        throw new Error(`BB_K8S_TOKEN_FILE ${file} cannot be read (${(err as Error).message})`);
      }
    }
    const caFile = env['BB_K8S_CA']?.trim();
    let ca: string | undefined;
    if (caFile) {
      try {
        ca = readFileSync(caFile, 'utf8');
      } catch (err) {
        throw new Error(`BB_K8S_CA ${caFile} cannot be read (${(err as Error).message})`);
      }
      if (!ca.includes('-----BEGIN CERTIFICATE-----'))
        throw new Error(`BB_K8S_CA ${caFile} is not a PEM certificate (no BEGIN CERTIFICATE line)`);
    }
    return kubeConfigFor(api, token, ca);
  }
  if (env['BB_K8S_CA']?.trim())
    throw new Error(
      'BB_K8S_CA is set but BB_K8S_API is not: inside a cluster the service account brings its own CA; set BB_K8S_API too, or unset BB_K8S_CA',
    );
  if (!env['KUBERNETES_SERVICE_HOST'])
    throw new Error(
      'BB_K8S_API is not set and this is not a pod of a cluster (no KUBERNETES_SERVICE_HOST): set BB_K8S_API to the API server URL',
    );
  const kc = new KubeConfig();
  kc.loadFromCluster();
  return kc;
}
