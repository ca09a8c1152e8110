import { mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, totalmem } from 'node:os';
import { join } from 'node:path';
import { BbError, errorMessage, redact, registerSecret } from '@bb/errors';
import { type ForgeEvent, type ForgeKind, registerForgeKind } from '@bb/forge';
import {
  type Backend,
  bottleRemediator,
  LOCAL_BACKEND_WARNING,
  readMeta,
  reclaimBuildEngines,
  supervisedBottles,
} from '@bb/headless';
import {
  createWebhookHandler,
  createWebhookListener,
  installedCommit,
  Orchestrator,
  reconcile,
  sweep as sweepForge,
  toNodeListener,
} from '@bb/lifecycle';
import { homeLayout } from '@bb/names';
import {
  createProvenanceHandler,
  GitleaksScanner,
  loadOrCreateSigningKey,
  loadPrices,
  type SecretScanner,
  trustedKeyOf,
} from '@bb/provenance';
import { resolveBbHome } from '@bb/state';
import { createSuperviseApi, loadPolicy, SuperviseDesk } from '@bb/supervise';
import { forLog } from '@bb/wall';
import { pino } from 'pino';
import pkg from '../package.json' with { type: 'json' };
import { isLoopbackHost } from './access';
import { createApp } from './app';
import { backendKinds } from './backends';
import { loadConfig, type OrchestratorConfig, webhookSecretsOf } from './config';
import { awaitAgreement, configHash, keepCheckingIn } from './fleet-config';
import { type OrchestratorState, openState } from './state';

export interface ServeOptions {
  /** Configuration (see `loadConfig`). @default process.env */
  env?: Record<string, string | undefined>;
  /** Where log lines go (JSON, one per line). @default stdout */
  logStream?: NodeJS.WritableStream;
  /** A backend to use instead of the one `BB_BACKEND` names. */
  backend?: Backend;
  /**
   * A forge kind of your own (a `GitHubForge`'s, say): registered with
   * `@bb/forge` (bottles find it there) and used as if `FORGE_KIND` named it.
   * Its own variables still come from `env`. @default the kind `FORGE_KIND` names
   */
  kind?: ForgeKind;
  /** State to use instead of the one `BB_DATABASE_URL` names (closed with the service). */
  state?: OrchestratorState;
  /** A secret scanner instead of gitleaks. */
  scanner?: SecretScanner;
  /** The bot's login, when known; otherwise asked of the forge (`ForgeSite.whoami`). */
  botLogin?: string;
}

export interface RunningOrchestrator {
  /** `http://host:port` the orchestrator listens on. */
  url: string;
  config: OrchestratorConfig;
  orchestrator: Orchestrator;
  /**
   * Stop taking requests, finish those in flight, stop the watchdog, the
   * sweep and the turn monitors, close the database. Running bottles keep
   * running; the next start watches them again, and events still waiting are
   * in the inbox.
   */
  close(): Promise<void>;
}

/**
 * Run the orchestrator: read and check the configuration, open the state,
 * reconcile with the backend (watch running bottles again, remove orphans and
 * bottles that never started, replay the inbox), listen for webhooks, start
 * the watchdog, the REST sweep and the ledger's pruning.
 */
export async function serve(options: ServeOptions = {}): Promise<RunningOrchestrator> {
  const env = options.env ?? process.env;
  if (options.kind) {
    registerForgeKind(options.kind, { replace: true });
    if (env['FORGE_KIND'] && env['FORGE_KIND'] !== options.kind.name)
      throw new BbError(
        'INVALID_INPUT',
        `FORGE_KIND is ${env['FORGE_KIND']} but serve() was given the ${options.kind.name} kind: unset one`,
      );
  }
  const config = loadConfig(options.kind ? { ...env, FORGE_KIND: options.kind.name } : env);
  const { kind, site } = config.forge;
  registerSecret(config.FORGE_TOKEN);
  for (const s of webhookSecretsOf(config)) registerSecret(s);
  registerSecret(config.BB_API_TOKEN);
  const log = pino(
    {
      base: { name: 'bb-orchestrator' },
      // Redacted, and every string printable: a log read on a terminal is a terminal (I8).
      formatters: { log: (o) => forLog(redact(o)) },
      hooks: {
        logMethod(args, method) {
          method.apply(
            this,
            args.map((a) => (typeof a === 'string' ? redact(a) : a)) as typeof args,
          );
        },
      },
    },
    options.logStream ?? process.stdout,
  );
  const home = resolveBbHome(env);
  mkdirSync(home, { recursive: true, mode: 0o700 });
  const bottleEnv = { ...env, BB_HOME: home };

  const state = options.state ?? (await openState(config.BB_DATABASE_URL, home));
  const { store, runs: provStore } = state;
  const key = loadOrCreateSigningKey(home);
  // Unique among orchestrators on this machine (no two listen on one port) and the
  // same across a restart, so it takes its own leases back at once.
  const replica =
    config.BB_REPLICA_ID ??
    `${hostname()}:${config.BB_PORT === 0 ? `pid${process.pid}` : config.BB_PORT}`;
  // Each orchestrator may sign with a key of its own: the fleet trusts every one so added,
  // and verifying a record says which signed it.
  await state.runs.trustKey(trustedKeyOf(key, replica));
  // A price table that is not valid stops the start: spend would be counted wrong.
  const prices = loadPrices(join(home, 'config'));
  const botLogin = options.botLogin ?? (await site.whoami(config.FORGE_TOKEN));
  const forgeFor = (owner: string, repo: string) =>
    site.forgeFor({ owner, repo, token: config.FORGE_TOKEN });
  const warn = (m: string) => log.warn({ msg: m });
  // An engine of containers (Docker, local): bottles are made of them here, and
  // supervise decisions rebuild images and reload proxies on it. A platform that
  // runs whole bottles (Kubernetes) gives its own runner and no containers.
  const backend =
    options.backend ??
    (backendKinds.makesContainers(config.BB_BACKEND)
      ? backendKinds.make(config.BB_BACKEND, { env, warn })
      : undefined);
  // Each bottle's gate gets the bot's token, or (a GitHub App) a token made for it alone.
  const runner = await backendKinds.runner(config.BB_BACKEND, {
    env: bottleEnv,
    warn,
    token: config.FORGE_TOKEN,
    credentials: site.credentials,
    warmMs: config.BB_WARM_WINDOW,
    backend,
    ...(config.BB_POOL.size > 0
      ? { pool: { sizes: config.BB_POOL, forge: { kind: kind.name, site: site.env() } } }
      : {}),
    log: (e) => log.info(e),
  });
  if (!runner.isolates) log.warn(LOCAL_BACKEND_WARNING);
  // What stuck agents ask for: kept in this database, decided with `bb supervise`.
  const operators = state.operators;
  // The engine this replica runs bottles on: in a fleet sharing a bottle store, a
  // decision is applied where its bottle runs (its meta's engine), by that replica.
  const engine = homeLayout(bottleEnv).shared ? await backend?.identity?.() : undefined;
  const desk = new SuperviseDesk({
    store: state.supervise,
    bottles: supervisedBottles(bottleEnv),
    ...(engine
      ? {
          // A bottle whose meta names no engine is nobody's to apply to (no replica guesses).
          appliesTo: (slug: string) => readMeta(slug, bottleEnv)?.engine === engine,
        }
      : {}),
    policy: loadPolicy(home),
    // Applied on the engine of containers, or as the platform of pods applies them (its
    // gates watch their proxies' files; it rebuilds nothing).
    ...(runner.remediator
      ? { remediator: runner.remediator }
      : backend
        ? { remediator: bottleRemediator({ backend, env: bottleEnv }) }
        : {}),
  });
  const orchestrator = new Orchestrator({
    forge: { kind, site },
    token: config.FORGE_TOKEN,
    botLogin,
    org: config.FORGE_ORG,
    store,
    inbox: store,
    runner,
    provenance: {
      store: provStore,
      key,
      scanner: options.scanner ?? new GitleaksScanner(),
      bbVersion: pkg.version,
      gitCommit: installedCommit(),
      prices,
    },
    env: bottleEnv,
    concurrency: config.BB_CONCURRENCY,
    capacity: {
      maxStarting: config.BB_STARTUP_CONCURRENCY,
      memoryBudget: config.BB_MEMORY_BUDGET ?? totalmem(),
    },
    doneGraceMs: config.BB_DONE_GRACE,
    watchdogTimeoutMs: config.FORGE_WATCHDOG_TIMEOUT,
    watchdogIntervalMs: config.FORGE_WATCHDOG_INTERVAL,
    resumeOnHumanPush: config.FORGE_RESUME_ON_PUSH,
    mentionOnly: config.FORGE_MENTION_ONLY,
    feedback: config.FORGE_FEEDBACK,
    turnOutcomes: config.BB_TURN_COMMENTS,
    budgets: {
      defaults: {
        turnMinutes:
          config.BB_BUDGET_TURN_TIME === undefined
            ? undefined
            : config.BB_BUDGET_TURN_TIME / 60_000,
        turnTokens: config.BB_BUDGET_TURN_TOKENS,
        turnUsd: config.BB_BUDGET_TURN_USD,
        issueTokens: config.BB_BUDGET_ISSUE_TOKENS,
        issueUsd: config.BB_BUDGET_ISSUE_USD,
      },
      dayTokens: config.BB_BUDGET_DAY_TOKENS,
      dayUsd: config.BB_BUDGET_DAY_USD,
      resume: config.BB_BUDGET_RESUME,
      maxIdleTurns: config.BB_LOOP_IDLE_TURNS,
      maxTurnComments: config.BB_LOOP_TURN_COMMENTS,
    },
    ...(config.BB_IGNORE_USERS ? { ignoreUsers: config.BB_IGNORE_USERS } : {}),
    acknowledge: config.FORGE_ACKNOWLEDGE,
    // Requests are posted on their issues and decided there too (`/bb approve …`).
    supervise: desk,
    superviseDeciders: config.BB_SUPERVISE_DECIDERS,
    superviseAuto: config.BB_SUPERVISE_AUTO,
    fleet: {
      leases: state.leases,
      ...(state.unleased ? { unleased: state.unleased } : {}),
      holder: replica,
      ttlMs: config.BB_LEASE_TTL,
    },
    log: (e) => log.info(e),
  });

  const webhookOptions = {
    scheme: kind.webhook,
    secrets: webhookSecretsOf(config),
    accept: (e: ForgeEvent) => orchestrator.accept(e),
    log: (e: Record<string, unknown>) => log.info(e),
  };
  const webhook = createWebhookHandler(webhookOptions);
  // Deliveries skip the Request/Response layer: the same endpoint on node:http directly.
  const deliveries = createWebhookListener(webhookOptions);
  const app = createApp({
    webhook: { path: kind.webhook.path, handle: webhook },
    provenance: createProvenanceHandler({
      store: provStore,
      publicKey: key.publicKey,
      publicPem: key.publicPem,
      keyId: key.keyId,
      fleetKeys: true,
    }),
    store,
    runs: provStore,
    capacity: orchestrator.capacity,
    notices: () => orchestrator.notices,
    proposals: () => desk.list({ status: 'pending' }),
    // Decided from elsewhere, by operators with their own tokens (`bb supervise --server`).
    supervise: createSuperviseApi(desk, { log: (e) => log.warn(e) }),
    site,
    version: pkg.version,
    access: {
      token: config.BB_API_TOKEN,
      loopback: isLoopbackHost(config.BB_HOST),
      operator: (t) => operators.verify(t),
    },
  });
  if (!config.BB_API_TOKEN && !isLoopbackHost(config.BB_HOST))
    log.warn({
      msg: `listening on ${config.BB_HOST}: the webhook is open (it is signed), the dashboard and the APIs are closed until BB_API_TOKEN is set`,
    });

  // Image builds a killed orchestrator left running on engines of their own stop now.
  await reclaimBuildEngines(join(home, 'builds')).catch((err) =>
    log.warn({ msg: 'could not clean up an earlier build engine', error: errorMessage(err) }),
  );
  // Every replica must work from one configuration: one that differs waits here, taking
  // no work, until it agrees with the fleet (the first-joined live member's).
  const fleetConfig = {
    roster: state.roster,
    replica,
    hash: configHash(join(home, 'config')),
    ttlMs: config.BB_LEASE_TTL,
    log: {
      info: (e: Record<string, unknown>) => log.info(e),
      error: (e: Record<string, unknown>) => log.error(e),
    },
  };
  await awaitAgreement(fleetConfig);
  const stopCheckIns = keepCheckingIn(fleetConfig);
  const report = await reconcile(orchestrator, { store, runner, log: (e) => log.info(e) });
  log.info({ msg: 'reconciled with the backend', ...report });
  // What an earlier process left of its pool went with the reconcile: this one's is made now.
  orchestrator.startPool();

  const appListener = toNodeListener(app);
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (path === kind.webhook.path) deliveries(req, res);
    else appListener(req, res);
  });
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(config.BB_PORT, config.BB_HOST, () => ok());
  });
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.family === 'IPv6' ? `[${addr.address}]` : addr.address}:${addr.port}`;
  orchestrator.startWatchdog();

  let sweeping: Promise<void> | undefined;
  const sweep = () => {
    // One orchestrator sweeps at a time (its lease lasts the interval; a stopped one's runs out).
    sweeping ??= orchestrator
      .claimTask('sweep', Math.max(60_000, config.BB_SWEEP_INTERVAL))
      .then(async (mine) => {
        if (!mine) return;
        const repos = await site.repositories(config.FORGE_TOKEN, config.FORGE_REPOS);
        await sweepForge(
          {
            store,
            forgeFor,
            botLogin,
            accept: (e) => orchestrator.accept(e),
            // Well inside the ledger's memory: a comment it forgot is never taken as new.
            notBefore: new Date(Date.now() - config.BB_LEDGER_RETENTION / 2),
            log: (e) => log.info(e),
          },
          repos,
        );
      })
      .catch((err) => log.warn({ msg: 'sweep failed', error: errorMessage(err) }))
      .finally(() => {
        sweeping = undefined;
      });
  };
  const sweepTimer =
    config.BB_SWEEP_INTERVAL > 0 ? setInterval(sweep, config.BB_SWEEP_INTERVAL) : undefined;
  sweepTimer?.unref();
  if (config.BB_SWEEP_INTERVAL > 0) sweep();

  // Deliveries and handled events past the replay window go (open events never do).
  const prune = async () => {
    try {
      const before = new Date(Date.now() - config.BB_LEDGER_RETENTION);
      const deliveries = await store.pruneDeliveries(before);
      const events = await store.pruneInbox(before);
      if (deliveries + events > 0) log.info({ msg: 'ledger pruned', deliveries, events });
    } catch (err) {
      log.warn({ msg: 'ledger pruning failed', error: errorMessage(err) });
    }
  };
  await prune();
  const pruneTimer = setInterval(prune, 3_600_000);
  // New requests taken in, old ones expired, and decisions made elsewhere (another
  // replica, the host's bb supervise) applied here when their bottle runs here.
  let deskBusy = false;
  const deskTimer = setInterval(() => {
    if (deskBusy) return;
    deskBusy = true;
    desk
      .sync()
      .catch((err) =>
        log.warn({ msg: 'could not look at the supervise requests', error: errorMessage(err) }),
      )
      .finally(() => {
        deskBusy = false;
      });
  }, 2_000);
  deskTimer.unref();
  pruneTimer.unref();
  log.info({
    msg: 'listening',
    url,
    home,
    state: state.where,
    replica: orchestrator.fleet.holder,
    backend: runner.backendName,
    forge: `${kind.name} ${site.location}`,
    webhook: `${url}${kind.webhook.path}`,
    bot: botLogin,
    org: config.FORGE_ORG,
    startupConcurrency: orchestrator.capacity.maxStarting,
    memoryBudgetBytes: orchestrator.capacity.memoryBudget,
  });

  let closed: Promise<void> | undefined;
  return {
    url,
    config,
    orchestrator,
    close: () =>
      (closed ??= (async () => {
        log.info({ msg: 'shutting down; running bottles keep running, warm ones are cooled' });
        if (sweepTimer) clearInterval(sweepTimer);
        clearInterval(pruneTimer);
        clearInterval(deskTimer);
        await orchestrator.coolAll();
        orchestrator.close();
        // Nothing stays pooled with nobody to hand it out.
        await runner.pool?.close();
        runner.close?.();
        // The others take this one's issues over now rather than when its leases run out.
        await orchestrator.releaseLeases().catch(() => {});
        stopCheckIns();
        await Promise.resolve()
          .then(() => state.roster.leave(replica))
          .catch(() => {});
        await new Promise<void>((r) => {
          server.close(() => r());
          server.closeIdleConnections();
        });
        await sweeping;
        await site.close?.();
        await state.close();
      })()),
  };
}
