/**
 * @module
 * `@bb/backend-kubernetes`: bot-bottle bottles on Kubernetes, each a group of
 * objects (a claim, a gate pod with the only Secret, an agent pod with none,
 * network policies), and the RBAC the orchestrator needs (`deploy/`), which
 * grants no `pods/exec`, `pods/attach` or `pods/portforward`.
 * Test it with `@bb/backend-kubernetes/testing` (an in-process fake API server).
 */

export {
  type Access,
  describeAccess,
  ORCHESTRATOR_ACCESS,
  ORCHESTRATOR_FORBIDDEN,
  type PolicyRule,
  rulesAllow,
} from './access';
export { type ClusterCheck, type ClusterCheckOptions, clusterChecks } from './doctor';
export { clusterChecksFromEnv, DEFAULT_NAMESPACE, kubernetesRunnerFromEnv } from './from-env';
export {
  type KubeBottleStatus,
  KubernetesBottles,
  type KubernetesBottlesOptions,
  kubeConfigFor,
} from './kubernetes-bottles';
export {
  type BottleObjects,
  GATE_PORT,
  type KubeBottleSpec,
  names,
  type PartSpec,
  planBottle,
  RUNTIME_DIR,
} from './manifests';
export { IN_POD } from './pod-paths';
export { type KubernetesRunnerOptions, kubernetesRunner } from './runner';
