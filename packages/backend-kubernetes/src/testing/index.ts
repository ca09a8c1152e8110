/**
 * @module
 * `@bb/backend-kubernetes/testing`: a Kubernetes API server double in process
 * (`FakeKubernetesApi`: CRUD and watch of the kinds bottles use, every call
 * recorded, every object checked against the API's published schemas with
 * `publishedSchemas`), for tests where no cluster can be had, and
 * `describeKubernetesIsolation`, what a Kubernetes backend must ask of the cluster.
 */

export { deployedObjects, deployedRoleRules } from './deploy';
export {
  type ApiCall,
  type FakeClusterOptions,
  FakeKubernetesApi,
  type PodFate,
  type SchemaCheck,
} from './fake-api-server';
export { describeKubernetesIsolation, type KubernetesIsolationOptions } from './isolation';
export { baselineViolations, restrictedViolations } from './pod-security';
export { publishedSchemas } from './schemas';
