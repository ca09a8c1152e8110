import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import { GiteaClient, GiteaForge } from '@bb/forge';
import {
  type Backend,
  canMountDisks,
  configDir,
  DockerBackend,
  diskQuota,
  loadAgentManifest,
  loadBottleManifest,
} from '@bb/headless';
import { loadConfig } from '@bb/orchestrator';
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

/** Run every check; never throws. */
export async function runDoctor(
  io: CliIo,
  docker: Backend = new DockerBackend(),
): Promise<DoctorCheck[]> {
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
  } else {
    checks.push({ check: 'base image', ok: null, detail: 'skipped: no Docker engine' });
  }

  checks.push(diskCheck(io.env));

  const dir = configDir(io.env);
  const manifests: string[] = [];
  const problems: string[] = [];
  for (const kind of ['agents', 'bottles'] as const) {
    const d = join(dir, kind);
    if (!existsSync(d)) continue;
    for (const f of readdirSync(d)) {
      const m = /^(.+)\.(json|ya?ml)$/.exec(f);
      if (!m) continue;
      try {
        (kind === 'agents' ? loadAgentManifest : loadBottleManifest)(m[1]!, io.env);
        manifests.push(`${kind}/${f}`);
      } catch (err) {
        problems.push(errorMessage(err));
      }
    }
  }
  checks.push(
    problems.length
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
        },
  );

  // The operator's supervise ceiling: optional, but a broken one would refuse every decision.
  try {
    const policy = loadPolicy(resolveBbHome(io.env));
    const declared = Object.keys(policy.credentialHosts);
    const missing = declared.filter((n) => !io.env[n]);
    checks.push({
      check: 'supervise policy',
      ok: true,
      detail: existsSync(policyPath(resolveBbHome(io.env)))
        ? `valid; ${policy.egressCeiling.length} egress ceiling entries, secrets offered to bottles: ${declared.join(', ') || 'none'}${missing.length ? ` (not set here: ${missing.join(', ')}; approve routes naming them where they are)` : ''}`
        : 'none: the defaults (an empty ceiling; no secret offered to bottles)',
    });
  } catch (err) {
    checks.push({
      check: 'supervise policy',
      ok: false,
      detail: errorMessage(err),
      fix: 'see docs/supervise.md for the fields',
    });
  }

  if (!io.env['FORGE_GITEA_API']) {
    checks.push({
      check: 'orchestrator config',
      ok: null,
      detail: 'skipped: FORGE_GITEA_API is not set',
    });
    checks.push({ check: 'forge', ok: null, detail: 'skipped: FORGE_GITEA_API is not set' });
    return checks;
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
  const token = io.env['FORGE_TOKEN'];
  if (!token) {
    checks.push({
      check: 'forge',
      ok: false,
      detail: 'FORGE_TOKEN is not set',
      fix: "set FORGE_TOKEN to the bot user's token",
    });
    return checks;
  }
  const org = config?.FORGE_ORG ?? io.env['FORGE_ORG'] ?? 'bot-bottle';
  try {
    const client = new GiteaClient({ baseUrl: io.env['FORGE_GITEA_API'], token });
    const me = (await client.request<{ login: string }>({ method: 'GET', path: '/user' })).body
      .login;
    checks.push({
      check: 'forge',
      ok: true,
      detail: `${io.env['FORGE_GITEA_API']} answers; the token is ${me}'s`,
    });
    // Before anything that needs a scope: a missing one is named, not met as a failure later.
    const scopes = await scopeCheck(client);
    checks.push(scopes);
    if (scopes.ok === false) return checks;
    const forge = new GiteaForge({
      baseUrl: io.env['FORGE_GITEA_API'],
      token,
      owner: org,
      repo: '_',
    });
    const member = await forge.isOrgMember(org, me);
    checks.push(
      member
        ? { check: 'org membership', ok: true, detail: `${me} is a member of ${org}` }
        : {
            check: 'org membership',
            ok: false,
            detail: `${me} is not a member of ${org}: issues assigned to it will not launch agents`,
            fix: `add ${me} to the ${org} organisation in Gitea, or set FORGE_ORG to its org`,
          },
    );
    checks.push(await adminCheck(client, me, config?.FORGE_REPOS ?? []));
  } catch (err) {
    checks.push({
      check: 'forge',
      ok: false,
      detail: errorMessage(err),
      fix: 'check FORGE_GITEA_API (…/api/v1) and that FORGE_TOKEN is a valid token',
    });
  }
  return checks;
}

/** The scopes the bot's token needs (a `write:` scope includes its `read:`). */
export const NEEDED_SCOPES = ['write:repository', 'write:issue', 'read:organization', 'read:user'];

/**
 * Which scopes the token has, asked of the live API: a request outside a
 * scoped token's scopes is refused with a message that lists them, so one
 * call the bot never needs (notifications) tells them all.
 */
async function scopeCheck(client: GiteaClient): Promise<DoctorCheck> {
  let scopes: string[] | undefined;
  // Taken as an answer (not an error) so Gitea's message is read as it is.
  const res = await client.request<{ message?: string } | null>(
    { method: 'GET', path: '/notifications', query: { limit: 1 } },
    [200, 204, 403, 404],
  );
  if (res.status === 403) {
    const m = /token scope=([\w:,-]*)/.exec(res.body?.message ?? '');
    if (!m)
      return {
        check: 'token scopes',
        ok: false,
        detail: `Gitea refused: ${res.body?.message ?? '403'}`,
        fix: 'check the token (docs/gitea-setup.md)',
      };
    scopes = m[1]!.split(',').filter(Boolean);
  }
  if (!scopes || scopes.includes('all'))
    return { check: 'token scopes', ok: true, detail: 'the token is not limited to scopes' };
  const has = (need: string) => {
    const [level, what] = need.split(':');
    return scopes!.includes(need) || (level === 'read' && scopes!.includes(`write:${what}`));
  };
  const missing = NEEDED_SCOPES.filter((n) => !has(n));
  return missing.length === 0
    ? { check: 'token scopes', ok: true, detail: `the token has ${scopes.join(', ')}` }
    : {
        check: 'token scopes',
        ok: false,
        detail: `the token lacks ${missing.join(', ')} (it has ${scopes.join(', ') || 'none'})`,
        fix: `create a token with ${NEEDED_SCOPES.join(', ')} (docs/gitea-setup.md)`,
      };
}

/**
 * Whether the bot administers the repositories it works in: Gitea tells only
 * an admin who else may write, which decides whose comments drive an agent.
 */
async function adminCheck(
  client: GiteaClient,
  me: string,
  named: Array<{ owner: string; repo: string }>,
): Promise<DoctorCheck> {
  let repos = named.filter((r) => r.repo !== '*');
  if (repos.length === 0) {
    const { body } = await client.request<Array<{ name: string; owner: { login: string } }>>({
      method: 'GET',
      path: '/user/repos',
      query: { limit: 10 },
    });
    repos = (body ?? []).map((r) => ({ owner: r.owner.login, repo: r.name }));
  }
  if (repos.length === 0)
    return { check: 'repository admin', ok: null, detail: `${me} can reach no repository yet` };
  const notAdmin: string[] = [];
  for (const r of repos) {
    const { body } = await client.request<{ permission?: string }>({
      method: 'GET',
      path: `/repos/${encodeURIComponent(r.owner)}/${encodeURIComponent(r.repo)}/collaborators/${encodeURIComponent(me)}/permission`,
    });
    if (body.permission !== 'admin' && body.permission !== 'owner')
      notAdmin.push(`${r.owner}/${r.repo} (${body.permission ?? 'none'})`);
  }
  return notAdmin.length === 0
    ? {
        check: 'repository admin',
        ok: true,
        detail: `${me} administers ${repos.map((r) => `${r.owner}/${r.repo}`).join(', ')}`,
      }
    : {
        check: 'repository admin',
        ok: false,
        detail: `${me} does not administer ${notAdmin.join(', ')}: Gitea tells only an admin who may write, so there only members of the agent org drive agents`,
        fix: `make ${me} an admin collaborator of those repositories (docs/gitea-setup.md)`,
      };
}

export async function doctorCommand(argv: string[], io: CliIo, docker?: Backend): Promise<number> {
  const { values } = parse(argv, { json: { type: 'boolean' } }, DOCTOR_USAGE);
  if (values['help']) {
    io.stdout(DOCTOR_USAGE);
    return 0;
  }
  const checks = await runDoctor(io, docker);
  if (values['json']) io.stdout(`${JSON.stringify(checks, null, 2)}\n`);
  else
    for (const c of checks) {
      const mark =
        c.ok === true ? green(io, 'ok  ') : c.ok === false ? red(io, 'FAIL') : yellow(io, 'skip');
      io.stdout(`${mark} ${c.check}: ${c.detail}\n${c.fix ? `     fix: ${c.fix}\n` : ''}`);
    }
  return checks.some((c) => c.ok === false) ? 1 : 0;
}
