import { SelfSubjectAccessReview } from 'kubernetes-models/authorization.k8s.io/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PersistentVolumeClaim, Pod, Secret, Service } from 'kubernetes-models/v1';
import type { SchemaCheck } from './fake-api-server';

const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  Pod,
  Secret,
  PersistentVolumeClaim,
  Service,
  NetworkPolicy,
  SelfSubjectAccessReview,
};

/**
 * Check an object against the Kubernetes API's published OpenAPI schema, as the
 * `kubernetes-models` package ships it (a real API server refuses what fails).
 */
export const publishedSchemas: SchemaCheck = (kind, obj) => {
  const Model = MODELS[kind];
  if (!Model) throw new Error(`no published schema for ${kind} here`);
  new Model(obj as never).validate();
};
