import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { clusterChecksFromEnv } from '@bb/backend-kubernetes';
import { errorMessage } from '@bb/errors';
import { forgeKinds } from '@bb/forge';
import {
  type Backend,
  backendKinds,
  canMountDisks,
  configDir,
  DockerBackend,
  diskQuota,
  imageBuildScript,
  loadAgentManifest,
  loadBottleManifest,
} from '@bb/headless';
import { LABEL } from '@bb/names';
import { loadConfig } from '@bb/service';
import { resolveBbHome } from '@bb/state';
import { loadPolicy, policyPath } from '@bb/supervise';
import { SAFE_PATH } from '@bb/wall';
import { type CliIo, green, parse, red, yellow } from '../io';
import { DOCTOR_USAGE } from '../usage';

export interface DoctorCheck {
  check: string;
  /** `null`: not applicable here (skipped, with the reason in `detail`). */
  ok: boolean | null;
  detail: string;
  fix?: string;
}

/** Whether bottles get a disk of their own (quota): root, mkfs.ext4 and mount. */
function diskCheck(env: Record<string, string | undefined>): DoctorCheck {
  let quota: number | undefined;
  try {
    quota = diskQuota(undefined, env);
  } catch (err) {
    return {
      check: 'bottle disks',
      ok: false,
      detail: errorMessage(err),
      fix: 'set BB_BOTTLE_DISK to a size such as 10g, or off',
    };
  }
  if (quota === undefined)
    return {
      check: 'bottle disks',
      ok: null,
      detail: 'off (BB_BOTTLE_DISK=off): bottles share the host disk',
    };
  if (!canMountDisks())
    return {
      check: 'bottle disks',
      ok: false,
      detail: 'not root: bottles cannot get a disk of their own and would share the host disk',
      fix: 'run the orchestrator as root (it mounts one sparse image per bottle), or set BB_BOTTLE_DISK=off to accept that',
    };
  const missing = ['mkfs.ext4', 'mount'].filter(
    (t) => !SAFE_PATH.split(':').some((d) => existsSync(join(d, t))),
  );
  if (missing.length)
    return {
      check: 'bottle disks',
      ok: false,
      detail: `${missing.join(' and ')} not found`,
      fix: 'install e2fsprogs and mount (apt-get install e2fsprogs mount)',
    };
  return {
    check: 'bottle disks',
    ok: true,
    detail: `each bottle gets ${Math.round(quota / 1024 ** 2)} MB of its own`,
  };
}

/** The Docker engine and the base image bottles' gates run in. */
async function engineChecks(io: CliIo, docker: Backend): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [];
  const image = io.env['BB_BASE_IMAGE'] ?? 'bb-base:latest';
  let engine = false;
  try {
    await docker.list({ 'bb.doctor': 'probe' });
    engine = true;
    checks.push({
      check: 'docker engine',
      ok: true,
      detail: `answers at ${io.env['DOCKER_HOST'] ?? 'unix:///var/run/docker.sock'}`,
    });
  } catch (err) {
    checks.push({
      check: 'docker engine',
      ok: false,
      detail: errorMessage(err),
      fix: 'start the engine (as root: sh scripts/ensure-docker.sh) or point DOCKER_HOST at one; --backend local runs without isolation, for development only',
    });
  }
  if (engine) {
    try {
      await docker.ensureImage(image);
      checks.push({ check: 'base image', ok: true, detail: `${image} is present` });
    } catch (err) {
      checks.push({
        check: 'base image',
        ok: false,
        detail: errorMessage(err),
        fix: 'build it: sh scripts/build-base-image.sh (no registry needed)',
      });
    }
    // forklift's default image: only forklift needs it, so its absence fails nothing.
    const forklift = io.env['FORKLIFT_IMAGE'] || 'forklift/kitchen-sink:latest';
    try {
      await docker.ensureImage(forklift);
      checks.push({ check: 'forklift image', ok: true, detail: `${forklift} is present` });
    } catch {
      checks.push({
        check: 'forklift image',
        ok: null,
        detail: `${forklift} is not built (only forklift needs it)`,
        fix: `build it: sh ${imageBuildScript(forklift) ?? 'scripts/build-kitchen-sink-image.sh'} (Debian's and npm's packages, no registry needed)`,
      });
    }
  } else {
    checks.push({ check: 'base image', ok: null, detail: 'skipped: no Docker engine' });
    checks.push({ check: 'forklift image', ok: null, detail: 'skipped: no Docker engine' });
  }

  return checks;
}

/** A platform of whole bottles: it answers, listing this orchestrator's bottles. */
async function platformCheck(io: CliIo, name: string): Promise<DoctorCheck> {
  try {
    const runner = await backendKinds.runner(name, { env: io.env, token: '', warmMs: 0 });
    const bottles = new Set((await runner.ours()).map((c) => c.labels[LABEL.slug])).size;
    return {
      check: `${name} backend`,
      ok: true,
      detail: `answers; ${bottles} bottle${bottles === 1 ? '' : 's'} of this orchestrator`,
    };
  } catch (err) {
    return {
      check: `${name} backend`,
      ok: false,
      detail: errorMessage(err),
      fix:
        name === 'kubernetes'
          ? 'set BB_K8S_GATE_IMAGE, BB_K8S_STATE_CLAIM and BB_K8S_API (or run in the cluster): docs/guides/kubernetes.md'
          : `see the ${name} backend's documentation`,
    };
  }
}

/** The agent and bottle manifests are valid; the images the bottles name. */
function manifestCheck(env: Record<string, string | undefined>): {
  check: DoctorCheck;
  images: string[];
} {
  const dir = configDir(env);
  const manifests: string[] = [];
  const problems: string[] = [];
  const images = new Set<string>();
  for (const kind of ['agents', 'bottles'] as const) {
    const d = join(dir, kind);
    if (!existsSync(d)) continue;
    for (const f of readdirSync(d)) {
      const m = /^(.+)\.(json|ya?ml)$/.exec(f);
      if (!m) continue;
      try {
        if (kind === 'agents') loadAgentManifest(m[1]!, env);
        else {
          const image = loadBottleManifest(m[1]!, env).manifest.image;
          if (image) images.add(image);
        }
        manifests.push(`${kind}/${f}`);
      } catch (err) {
        problems.push(errorMessage(err));
      }
    }
  }
  const check: DoctorCheck = problems.length
    ? {
        check: 'manifests',
        ok: false,
        detail: problems.join('; '),
        fix: 'see docs/manifests.md for the fields',
      }
    : {
        check: 'manifests',
        ok: true,
        detail: manifests.length
          ? `${manifests.length} valid in ${dir}`
          : `none yet in ${dir} (bb demo brings its own)`,
      };
  return { check, images: [...images] };
}

/** Run every check; never throws. */
export async function runDoctor(
  io: CliIo,
  docker: Backend = new DockerBackend(),
): Promise<DoctorCheck[]> {
  const checks: DoctorCheck[] = [];
  // A platform that runs whole bottles (BB_BACKEND=kubernetes) is asked itself; the
  // Docker engine and bottle disks are an engine's.
  const backendName = io.env['BB_BACKEND'] || 'docker';
  let platform = false;
  try {
    platform = !backendKinds.makesContainers(backendName);
  } catch {
    // an unknown name: the configuration check says so
  }
  const manifests = manifestCheck(io.env);
  if (platform) {
    const answers = await platformCheck(io, backendName);
    checks.push(answers);
    // A cluster is held to what bottles need of it (docs/guides/kubernetes.md).
    if (backendName === 'kubernetes')
      checks.push(
        ...(answers.ok
          ? await clusterChecksFromEnv(io.env, manifests.images)
          : [
              {
                check: 'kubernetes cluster',
                ok: null,
                detail: 'not probed: the backend is not configured (above)',
              },
            ]),
      );
  } else {
    checks.push(...(await engineChecks(io, docker)));
    checks.push(diskCheck(io.env));
  }
  checks.push(manifests.check);

  // The operator's supervise ceiling: optional, but a broken one would refuse every decision.
  try {
    const policy = loadPolicy(resolveBbHome(io.env));
    const declared = Object.keys(policy.credentialHosts);
    const missing = declared.filter((n) => !io.env[n]);
    // An empty ceiling is valid, but every new host then needs the operator's --override
    // (never possible on the issue thread): said, with how to fill it.
    const empty = policy.egressCeiling.length === 0;
    checks.push({
      check: 'supervise policy',
      ok: true,
      detail: `${
        existsSync(policyPath(resolveBbHome(io.env)))
          ? `valid; ${policy.egressCeiling.length} egress ceiling entries, secrets offered to bottles: ${declared.join(', ') || 'none'}${missing.length ? ` (not set here: ${missing.join(', ')}; approve routes naming them where they are)` : ''}`
          : 'none: the defaults (an empty ceiling; no secret offered to bottles)'
      }${empty ? '. Warning: with an empty egress ceiling, approving any new host needs --override on the host, and none can be approved on an issue' : ''}`,
      ...(empty
        ? {
            fix: `list the hosts bottles may be given in egressCeiling of ${policyPath(resolveBbHome(io.env))} (docs/supervise.md)`,
          }
        : {}),
    });
  } catch (err) {
    checks.push({
      check: 'supervise policy',
      ok: false,
      detail: errorMessage(err),
      fix: 'see docs/supervise.md for the fields',
    });
  }

  let forge: ReturnType<typeof forgeKinds.fromEnv> | undefined;
  try {
    forge = forgeKinds.fromEnv(io.env);
  } catch (err) {
    // Nothing of the forge set here: the orchestrator's checks do not apply.
    if (!io.env['FORGE_TOKEN'] && !io.env['FORGE_KIND']) {
      const why = `skipped: the forge is not configured here (${errorMessage(err)})`;
      checks.push({ check: 'orchestrator config', ok: null, detail: why });
      checks.push({ check: 'forge', ok: null, detail: why });
      return checks;
    }
  }
  let config: ReturnType<typeof loadConfig> | undefined;
  try {
    config = loadConfig(io.env);
    checks.push({ check: 'orchestrator config', ok: true, detail: 'valid' });
  } catch (err) {
    checks.push({
      check: 'orchestrator config',
      ok: false,
      detail: errorMessage(err),
      fix: 'set the variables named above (docs/orchestrator.md)',
    });
  }
  if (!forge) return checks;
  const { kind, site } = forge;
  const token = io.env['FORGE_TOKEN'] || undefined;
  // A site that is its own identity (a GitHub App) needs no token.
  if (!token && !site.credentials) {
    checks.push({
      check: 'forge',
      ok: false,
      detail: 'FORGE_TOKEN is not set',
      fix: `set FORGE_TOKEN to the bot user's token${kind.name === 'github' ? ', or FORGE_GITHUB_APP_ID and FORGE_GITHUB_APP_KEY_FILE to a GitHub App (docs/github-setup.md)' : ''}`,
    });
    return checks;
  }
  const org = config?.FORGE_ORG ?? io.env['FORGE_ORG'] ?? 'bot-bottle';
  try {
    const me = await site.whoami(token);
    checks.push({
      check: 'forge',
      ok: true,
      detail: `${kind.name} at ${site.location} answers; ${token || !site.credentials ? `the token is ${me}'s` : `acting as ${site.credentials.describe} (${me})`}`,
    });
    // The kind's own checks first (a token's scopes, say): what they find missing is named
    // before it shows up as a failure below.
    const own = (await site.checks?.(token, config?.FORGE_REPOS ?? [])) ?? [];
    checks.push(...own);
    if (!token && site.credentials) {
      // An App is nobody's member: an issue launches when assigned to one of the org's.
      checks.push({
        check: 'org membership',
        ok: null,
        detail: `${site.credentials.describe} is no member of ${org}: assign issues to a member of ${org} (the App reads the org's members)`,
      });
      return checks;
    }
    let member: boolean;
    try {
      member = await site.forgeFor({ owner: org, repo: '_', token }).isOrgMember(org, me);
    } catch (err) {
      checks.push({
        check: 'org membership',
        ok: own.some((c) => c.ok === false) ? null : false,
        detail: `cannot be told: ${errorMessage(err)}`,
      });
      return checks;
    }
    checks.push(
      member
        ? { check: 'org membership', ok: true, detail: `${me} is a member of ${org}` }
        : {
            check: 'org membership',
            ok: false,
            detail: `${me} is not a member of ${org}: issues assigned to it will not launch agents`,
            fix: `add ${me} to the ${org} organisation on the forge, or set FORGE_ORG to its org`,
          },
    );
  } catch (err) {
    checks.push({
      check: 'forge',
      ok: false,
      detail: errorMessage(err),
      fix: `check the forge's address (${kind.summary}) and that FORGE_TOKEN is a valid token`,
    });
  }
  return checks;
}

export async function doctorCommand(argv: string[], io: CliIo, docker?: Backend): Promise<number> {
  const { values } = parse(
    argv,
    { json: { type: 'boolean' }, backend: { type: 'string' } },
    DOCTOR_USAGE,
  );
  const backend = values['backend'] as string | undefined;
  if (backend !== undefined && !backendKinds.names().includes(backend)) {
    io.stderr(
      `bb doctor: no backend ${JSON.stringify(backend)}; give one of ${backendKinds.names().join(', ')}\n`,
    );
    return 2;
  }
  const checks = await runDoctor(
    backend ? { ...io, env: { ...io.env, BB_BACKEND: backend } } : io,
    docker,
  );
  if (values['json']) io.stdout(`${JSON.stringify(checks, null, 2)}\n`);
  else
    for (const c of checks) {
      const mark =
        c.ok === true ? green(io, 'ok  ') : c.ok === false ? red(io, 'FAIL') : yellow(io, 'skip');
      io.stdout(`${mark} ${c.check}: ${c.detail}\n${c.fix ? `     fix: ${c.fix}\n` : ''}`);
    }
  return checks.some((c) => c.ok === false) ? 1 : 0;
}
