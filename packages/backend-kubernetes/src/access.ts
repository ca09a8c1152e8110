/** One thing a caller may or may not do in a namespace, as RBAC and `SelfSubjectAccessReview` name it. */
export interface Access {
  verb: string;
  /** `''`: the core group. */
  group: string;
  resource: string;
  subresource?: string;
}

/** A Role's rule (`rbac.authorization.k8s.io/v1` PolicyRule, the fields bot-bottle uses). */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

const core = (resource: string, verbs: string[], subresource?: string): Access[] =>
  verbs.map((verb) => ({ verb, group: '', resource, ...(subresource ? { subresource } : {}) }));

/**
 * What the orchestrator's service account must be allowed in the bottles' namespace:
 * every call `KubernetesBottles` and `bb doctor --backend kubernetes` make
 * (`deploy/rbac.yaml` grants exactly this; its test checks both ways).
 */
export const ORCHESTRATOR_ACCESS: readonly Access[] = [
  ...core('pods', ['get', 'list', 'watch', 'create', 'delete', 'deletecollection']),
  ...core('pods', ['get'], 'log'),
  ...core('persistentvolumeclaims', ['get', 'list', 'create', 'delete', 'deletecollection']),
  ...core('services', ['get', 'create', 'delete']),
  ...core('secrets', ['create', 'delete', 'deletecollection']),
  ...['create', 'delete', 'deletecollection'].map((verb) => ({
    verb,
    group: 'networking.k8s.io',
    resource: 'networkpolicies',
  })),
];

/**
 * What it must never be allowed there: a way into a running pod (a command, an
 * attached terminal, a forwarded port, an ephemeral container, the pod proxy),
 * reading a bottle's Secret back, or granting itself more.
 */
export const ORCHESTRATOR_FORBIDDEN: readonly Access[] = [
  ...core('pods', ['create', 'get'], 'exec'),
  ...core('pods', ['create', 'get'], 'attach'),
  ...core('pods', ['create', 'get'], 'portforward'),
  ...core('pods', ['get', 'create'], 'proxy'),
  ...core('pods', ['patch', 'update'], 'ephemeralcontainers'),
  ...core('secrets', ['get', 'list', 'watch']),
  ...['roles', 'rolebindings'].map((resource) => ({
    verb: 'create',
    group: 'rbac.authorization.k8s.io',
    resource,
  })),
];

/** `pods/log get` and the like, for messages. */
export function describeAccess(a: Access): string {
  return `${a.group ? `${a.group}/` : ''}${a.resource}${a.subresource ? `/${a.subresource}` : ''} ${a.verb}`;
}

/** Whether `rules` (one Role's) allow `a`, as RBAC's authorizer decides it. */
export function rulesAllow(rules: readonly PolicyRule[], a: Access): boolean {
  const name = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  return rules.some(
    (r) =>
      (r.apiGroups.includes(a.group) || r.apiGroups.includes('*')) &&
      (r.resources.includes(name) ||
        r.resources.includes('*') ||
        (a.subresource !== undefined && r.resources.includes(`*/${a.subresource}`))) &&
      (r.verbs.includes(a.verb) || r.verbs.includes('*')),
  );
}
