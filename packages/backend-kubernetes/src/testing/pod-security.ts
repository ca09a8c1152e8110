// Pod Security admission's "restricted" profile, for the fake API server: the
// checks of the published Pod Security Standards (kubernetes.io/docs/concepts/
// security/pod-security-standards, restricted, latest) that a pod spec alone
// decides, worded as the admission plugin words its refusal.

type Ctx = {
  privileged?: boolean;
  runAsNonRoot?: boolean;
  runAsUser?: number;
  allowPrivilegeEscalation?: boolean;
  capabilities?: { add?: string[]; drop?: string[] };
  seccompProfile?: { type?: string };
};
type Container = {
  name: string;
  securityContext?: Ctx;
  ports?: Array<{ hostPort?: number }>;
};
type PodSpec = {
  hostNetwork?: boolean;
  hostPID?: boolean;
  hostIPC?: boolean;
  securityContext?: Ctx;
  containers?: Container[];
  initContainers?: Container[];
  volumes?: Array<Record<string, unknown> & { name: string }>;
};

const VOLUME_TYPES = new Set([
  'configMap',
  'csi',
  'downwardAPI',
  'emptyDir',
  'ephemeral',
  'persistentVolumeClaim',
  'projected',
  'secret',
]);

const BASELINE_CAPS = new Set([
  'AUDIT_WRITE',
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'FSETID',
  'KILL',
  'MKNOD',
  'NET_BIND_SERVICE',
  'SETFCAP',
  'SETGID',
  'SETPCAP',
  'SETUID',
  'SYS_CHROOT',
]);

/** What "baseline" refuses in `spec` (the host's namespaces, ports and paths, privilege, added capabilities). */
export function baselineViolations(spec: PodSpec): string[] {
  const out: string[] = [];
  const containers = [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
  const host = (['hostNetwork', 'hostPID', 'hostIPC'] as const).filter((k) => spec[k]);
  if (host.length) out.push(`host namespaces (${host.map((k) => `${k}=true`).join(', ')})`);
  const who = (pred: (c: Container) => boolean) =>
    containers
      .filter(pred)
      .map((c) => `"${c.name}"`)
      .join(', ');
  const privileged = who((c) => c.securityContext?.privileged === true);
  if (privileged)
    out.push(`privileged (container ${privileged} must not set securityContext.privileged=true)`);
  const ports = who((c) => (c.ports ?? []).some((p) => p.hostPort));
  if (ports) out.push(`hostPort (container ${ports} must not set hostPort)`);
  const paths = (spec.volumes ?? []).filter((v) => 'hostPath' in v);
  if (paths.length) out.push(`hostPath volumes (${paths.map((v) => `"${v.name}"`).join(', ')})`);
  const caps = who((c) =>
    (c.securityContext?.capabilities?.add ?? []).some((a) => !BASELINE_CAPS.has(a)),
  );
  if (caps) out.push(`non-default capabilities (container ${caps})`);
  return out;
}

/** What "restricted" refuses in `spec`, one phrase per failed check; empty when admitted. */
export function restrictedViolations(spec: PodSpec): string[] {
  const out: string[] = [];
  const pod = spec.securityContext ?? {};
  const containers = [...(spec.initContainers ?? []), ...(spec.containers ?? [])];
  const failing = (pred: (c: Container) => boolean) =>
    containers
      .filter(pred)
      .map((c) => `"${c.name}"`)
      .join(', ');
  const say = (check: string, who: string, what: string) => {
    if (who) out.push(`${check} (container${who.includes(',') ? 's' : ''} ${who} ${what})`);
  };
  const host = (['hostNetwork', 'hostPID', 'hostIPC'] as const).filter((k) => spec[k]);
  if (host.length) out.push(`host namespaces (${host.map((k) => `${k}=true`).join(', ')})`);
  say(
    'privileged',
    failing((c) => c.securityContext?.privileged === true),
    'must not set securityContext.privileged=true',
  );
  say(
    'hostPort',
    failing((c) => (c.ports ?? []).some((p) => p.hostPort)),
    'must not set hostPort',
  );
  const badVolumes = (spec.volumes ?? []).filter(
    (v) => !Object.keys(v).some((k) => k !== 'name' && VOLUME_TYPES.has(k)),
  );
  if (badVolumes.length)
    out.push(
      `restricted volume types (volume${badVolumes.length > 1 ? 's' : ''} ${badVolumes.map((v) => `"${v.name}"`).join(', ')} must use an allowed type)`,
    );
  say(
    'allowPrivilegeEscalation != false',
    failing((c) => c.securityContext?.allowPrivilegeEscalation !== false),
    'must set securityContext.allowPrivilegeEscalation=false',
  );
  say(
    'unrestricted capabilities',
    failing(
      (c) =>
        !(c.securityContext?.capabilities?.drop ?? []).includes('ALL') ||
        (c.securityContext?.capabilities?.add ?? []).some((a) => a !== 'NET_BIND_SERVICE'),
    ),
    'must set securityContext.capabilities.drop=["ALL"] and add nothing but NET_BIND_SERVICE',
  );
  say(
    'runAsNonRoot != true',
    failing((c) => (c.securityContext?.runAsNonRoot ?? pod.runAsNonRoot) !== true),
    'must set securityContext.runAsNonRoot=true',
  );
  const rootPod = pod.runAsUser === 0;
  say(
    'runAsUser=0',
    failing((c) => (c.securityContext?.runAsUser ?? (rootPod ? 0 : undefined)) === 0),
    'must not set runAsUser=0',
  );
  const profile = (t: string | undefined) => t === 'RuntimeDefault' || t === 'Localhost';
  say(
    'seccompProfile',
    failing((c) => !profile(c.securityContext?.seccompProfile?.type ?? pod.seccompProfile?.type)),
    'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
  );
  return out;
}
