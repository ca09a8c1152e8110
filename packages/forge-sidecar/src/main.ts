import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { BbError, errorMessage, isBbError, redactString, registerSecret } from '@bb/errors';
import { type Forge, type ForgeKind, type ForgeSite, forgeKinds, ScopedForge } from '@bb/forge';
import { loadSidecarEnv, readSidecarToken, type SidecarEnv } from './config';
import { createGitGate } from './git-push';
import { holdReader } from './hold';
import { OpLog } from './op-log';
import { bundlePrBranch, PR_BUNDLE } from './pr-bundle';
import { QueueWriter } from './queue';
import { type RunningSidecar, type SidecarLogger, startSidecar } from './server';
import { forgeFollowingTokenFile } from './token-file';

/** The file beside the socket where the host leaves the launch's base commit. */
export const BASE_FILE = '.base-commit';

/**
 * The turn the host says is served, read from its file when asked (0 while it
 * says none). It never goes back: a file that cannot be read, or says less,
 * leaves the last turn read.
 */
function turnFrom(file: string): () => number {
  let last = 0;
  return () => {
    try {
      const n = Number(readFileSync(file, 'utf8').trim());
      if (Number.isSafeInteger(n) && n > last) last = n;
    } catch {
      // unreadable now: the last word stands
    }
    return last;
  };
}

/** The launch's base commit as the host left it beside the socket (undefined: none yet). */
function readBaseFile(dir: string): string | undefined {
  try {
    const text = readFileSync(join(dir, BASE_FILE), 'utf8').trim();
    return /^[0-9a-f]{40}$/.test(text) ? text : undefined;
  } catch {
    return undefined;
  }
}

/** A JSON-lines logger on stderr whose every line is redacted of registered secrets. */
export function stderrLogger(): SidecarLogger {
  const line = (level: string) => (obj: Record<string, unknown>, msg: string) => {
    process.stderr.write(
      `${redactString(JSON.stringify({ time: new Date().toISOString(), level, msg, ...obj }))}\n`,
    );
  };
  return { info: line('info'), warn: line('warn'), error: line('error') };
}

export interface RunSidecarOptions {
  env: Record<string, string | undefined>;
  /**
   * Build the forge (a third party's, say); `FORGE_TOKEN` holds the token read.
   * @default the site `FORGE_KIND` (and `FORGE_KIND_MODULE`) and its variables describe
   */
  makeForge?: (env: SidecarEnv & { FORGE_TOKEN: string }) => Forge;
  logger?: SidecarLogger;
}

/**
 * The forge site the environment describes. A kind not built in comes from
 * FORGE_KIND_MODULE: a bundled ES module whose default export is the kind.
 */
export async function forgeSiteFromEnv(
  env: SidecarEnv,
  raw: Record<string, string | undefined>,
): Promise<ForgeSite> {
  if (env.FORGE_KIND_MODULE) {
    let kind: ForgeKind | undefined;
    try {
      const mod = (await import(pathToFileURL(env.FORGE_KIND_MODULE).href)) as {
        default?: ForgeKind;
      };
      kind = mod.default;
    } catch (err) {
      throw new BbError(
        'INVALID_INPUT',
        `FORGE_KIND_MODULE ${env.FORGE_KIND_MODULE} cannot be loaded: ${errorMessage(err)}`,
      );
    }
    if (!kind || typeof kind.fromEnv !== 'function' || typeof kind.name !== 'string')
      throw new BbError(
        'INVALID_INPUT',
        `FORGE_KIND_MODULE ${env.FORGE_KIND_MODULE} does not export a forge kind as its default`,
      );
    if (env.FORGE_KIND && kind.name !== env.FORGE_KIND)
      throw new BbError(
        'INVALID_INPUT',
        `FORGE_KIND_MODULE ${env.FORGE_KIND_MODULE} is the ${kind.name} kind, not ${env.FORGE_KIND}`,
      );
    forgeKinds.register(kind);
  }
  return forgeKinds.fromEnv(raw).site;
}

/** Start a sidecar from its environment, as the `bb-forge-sidecar` command does. */
export async function runSidecarFromEnv(options: RunSidecarOptions): Promise<RunningSidecar> {
  const env = loadSidecarEnv(options.env);
  const token = readSidecarToken(env);
  registerSecret(token);
  const site = options.makeForge ? undefined : await forgeSiteFromEnv(env, options.env);
  const make = (t: string) =>
    options.makeForge?.({ ...env, FORGE_TOKEN: t }) ??
    site!.forgeFor({ owner: env.FORGE_OWNER, repo: env.FORGE_REPO, token: t });
  const logger = options.logger ?? stderrLogger();
  // A token in a file may be renewed there by the host (one that expires); whatever the
  // kind makes of it for git (base64, a signature) is as secret as it.
  const inner = env.FORGE_TOKEN_FILE
    ? forgeFollowingTokenFile(make, env.FORGE_TOKEN_FILE, token, () =>
        logger.info({}, 'the forge token was renewed'),
      )
    : make(token);
  for (const v of Object.values(inner.gitRemote()?.headers ?? {})) registerSecret(v);
  const forge = new ScopedForge(inner, {
    issue: env.FORGE_ISSUE_NUMBER,
    prs: env.FORGE_PR_NUMBER ? [env.FORGE_PR_NUMBER] : [],
    branch: env.BB_BRANCH,
  });
  const owner = env.BB_SOCKET_OWNER?.split(':').map(Number) as [number, number] | undefined;
  const gitDir = env.BB_GIT_DIR ?? join(dirname(env.BB_OPS_LOG), 'push.git');
  const running = await startSidecar({
    forge,
    socketPath: env.BB_SIDECAR_SOCKET,
    opLog: new OpLog(env.BB_OPS_LOG, { maxBytes: env.BB_OPS_LOG_MAX }),
    queue: new QueueWriter(env.BB_QUEUE_DIR, env.BB_SLUG),
    git: createGitGate({
      workspace: env.BB_WORKSPACE,
      repo: gitDir,
      ...(env.BB_GIT_DIR_MAX ? { maxRepoBytes: env.BB_GIT_DIR_MAX } : {}),
      ...(env.BB_GIT_ALTERNATE ? { alternates: [env.BB_GIT_ALTERNATE] } : {}),
      // The launch's base, from the environment or, for the launch's own turn (its gate
      // starts before the checkout is made), from the file the host writes beside the socket.
      exclude: () => {
        const base = env.BB_BASE_COMMIT ?? readBaseFile(dirname(env.BB_SIDECAR_SOCKET));
        return base ? [base] : [];
      },
    }),
    branch: env.BB_BRANCH,
    ...(env.BB_TURN_FILE ? { turn: turnFrom(env.BB_TURN_FILE) } : {}),
    ...(env.BB_HOLD_FILE && env.BB_HOLD_ID
      ? { notHeld: holdReader(env.BB_HOLD_FILE, env.BB_HOLD_ID) }
      : {}),
    socketOwner: owner ? { uid: owner[0], gid: owner[1] } : undefined,
    ...(env.BB_SOCKET_MODE !== undefined ? { socketMode: env.BB_SOCKET_MODE } : {}),
    logger,
  });
  // A resumed turn: the agent's checkout gets the PR branch as the forge has it (people's
  // pushes). The agent waits for `<bundle>.done` before it starts; serving does not.
  const remote = inner.gitRemote();
  if (env.BB_SYNC_PR === '1' && remote) {
    void bundlePrBranch({
      repo: gitDir,
      remote,
      branch: env.BB_BRANCH,
      base: env.BB_BASE_COMMIT,
      out: join(dirname(env.BB_SIDECAR_SOCKET), PR_BUNDLE),
      ...(env.BB_GIT_ALTERNATE ? { alternates: [env.BB_GIT_ALTERNATE] } : {}),
    }).then((said) => logger.info({ branch: env.BB_BRANCH }, said));
  }
  return running;
}

/** The `bb-forge-sidecar` command: run until SIGTERM or SIGINT, then shut down gracefully. */
export async function sidecarMain(): Promise<void> {
  const log = stderrLogger();
  let running: RunningSidecar;
  try {
    running = await runSidecarFromEnv({ env: process.env, logger: log });
  } catch (err) {
    process.stderr.write(`bb-forge-sidecar: ${errorMessage(err)}\n`);
    process.exit(isBbError(err, 'INVALID_INPUT') ? 2 : 1);
  }
  const stop = (signal: string) => {
    log.info({ signal }, 'shutting down');
    void running.close().then(() => process.exit(0));
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}
