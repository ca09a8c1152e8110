// Helpers shared by the end-to-end tests.
import { existsSync, rmSync } from 'node:fs';
import { acmeWorld, type GiteaTestServer, type GiteaWorldSeed } from '@bb/forge/test-server';
import {
  type Backend,
  destroy,
  HOME_LABEL,
  homeLabel,
  listBottles,
  unmountAllUnder,
} from '@bb/headless';
import { scriptAgent as headlessScriptAgent, makeTestHome } from '@bb/headless/testing';
import { type RunningOrchestrator, serve } from '@bb/service';
import { BASE_IMAGE } from '@bb/tooling/docker';
import Docker from 'dockerode';

export { prSteps, prTurn, rememberTurn } from '@bb/headless/testing';

/** Poll `fn` every 100 ms until it returns something truthy; fail after `ms`. */
export async function until<T>(
  what: string,
  fn: () => T | undefined | Promise<T | undefined>,
  ms = 60_000,
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Whether the image with the real agent CLIs (`bb-agents`, scripts/build-agents-image.sh)
 * is on the engine. With BB_REQUIRE_DOCKER=1 (CI) a missing image is an error, not a skip.
 */
export async function probeAgentsImage(dockerOk: boolean): Promise<{ ok: boolean; image: string }> {
  return probeImage(
    dockerOk,
    process.env['BB_AGENTS_IMAGE'] ?? 'bb-agents:latest',
    'scripts/build-agents-image.sh',
  );
}

/** forklift's default image, forklift/kitchen-sink:latest (scripts/build-kitchen-sink-image.sh). */
export async function probeKitchenSink(dockerOk: boolean): Promise<{ ok: boolean; image: string }> {
  return probeImage(
    dockerOk,
    process.env['FORKLIFT_IMAGE'] ?? 'forklift/kitchen-sink:latest',
    'scripts/build-kitchen-sink-image.sh',
  );
}

/** A plain Debian image with apt (scripts/build-debian-image.sh), for builds that install packages. */
export async function probeDebianImage(dockerOk: boolean): Promise<{ ok: boolean; image: string }> {
  return probeImage(
    dockerOk,
    process.env['BB_DEBIAN_IMAGE'] ?? 'bb-debian:bookworm',
    'scripts/build-debian-image.sh',
  );
}

async function probeImage(
  dockerOk: boolean,
  image: string,
  script: string,
): Promise<{ ok: boolean; image: string }> {
  const ok =
    dockerOk &&
    (await new Docker()
      .getImage(image)
      .inspect()
      .then(
        () => true,
        () => false,
      ));
  if (dockerOk && !ok && process.env['BB_REQUIRE_DOCKER'] === '1')
    throw new Error(`BB_REQUIRE_DOCKER=1 but ${image} is missing: run ${script}`);
  return { ok, image };
}

/**
 * Debian's Chromium for browser tests, or why there is none. With
 * BB_REQUIRE_DOCKER=1 (CI) a missing browser is an error, not a skip.
 */
export function probeChromium(path = '/usr/bin/chromium'): { ok: boolean; path: string } {
  if (existsSync(path)) return { ok: true, path };
  if (process.env['BB_REQUIRE_DOCKER'] === '1')
    throw new Error(`BB_REQUIRE_DOCKER=1 but ${path} is missing: run scripts/ensure-chromium.sh`);
  console.warn(`[bb] skipping browser tests: ${path} is missing (scripts/ensure-chromium.sh)`);
  return { ok: false, path };
}

/**
 * A temporary BB_HOME with agent and bottle manifests. Bottles default to one
 * `default` bottle on the base image.
 */
export function makeHome(
  prefix: string,
  agents: Record<string, unknown>,
  bottles: Record<string, unknown> = { default: { image: BASE_IMAGE } },
): string {
  return makeTestHome(prefix, { agents, bottles });
}

/** A script agent's manifest with these turns. */
export function scriptAgent(turns: unknown[], name = 'Implementer') {
  return headlessScriptAgent(turns, { name });
}

/**
 * The forge the end-to-end tests use: alice (a human in org acme) files issues in
 * acme/widgets; bb-claude (in the agent org bot-bottle, with `botToken`) is the bot.
 */
export function forgeWorld(botToken: string): GiteaWorldSeed {
  // The bot administers the repository (docs/gitea-setup.md): Gitea tells only an
  // admin who may write, which decides whose comments drive the agent.
  return acmeWorld(botToken, { aliceToken: 'alice-token-1234567890', admins: ['bb-claude'] });
}

/**
 * Remove every bottle of a test's BB_HOME (so their disks are unmounted) and any
 * container of it left on the engine, then the home itself.
 */
export async function destroyHome(home: string, backend: Backend): Promise<void> {
  for (const slug of listBottles({ BB_HOME: home }))
    await destroy(slug, { backend, env: { BB_HOME: home } }).catch(() => {});
  for (const c of await backend
    .list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) })
    .catch(() => []))
    await backend.destroy(c.id).catch(() => {});
  await removeHome(home);
}

/**
 * Remove a test's BB_HOME: whatever is still mounted below it (a bottle disk of a
 * bottle not destroyed) is unmounted first, so the removal is never busy.
 */
export async function removeHome(home: string): Promise<void> {
  await unmountAllUnder(home);
  rmSync(home, { recursive: true, force: true });
}

/**
 * alice files an issue in acme/widgets for the bot's `agent`: labelled
 * `bot-bottle:<agent>` and assigned to bb-claude. Its number.
 */
export function fileIssue(
  gitea: GiteaTestServer,
  agent: string,
  title: string,
  body?: string,
): number {
  return gitea.createIssue('alice', 'acme/widgets', {
    title,
    ...(body === undefined ? {} : { body }),
    labels: [`bot-bottle:${agent}`],
    assignees: ['bb-claude'],
  });
}

/**
 * `bb serve` in-process for a test: on loopback (any port), against the test
 * forge with the bot's token, no sweep, quiet. Its webhooks are added to the
 * forge unless `hook` is false.
 */
export async function serveFor(o: {
  home: string;
  gitea: GiteaTestServer;
  token: string;
  secret: string;
  /** The service's own backend (from its environment) when left out. */
  backend?: Backend;
  env?: Record<string, string>;
  logStream?: NodeJS.WritableStream;
  hook?: boolean;
}): Promise<RunningOrchestrator> {
  const orch = await serve({
    env: {
      BB_HOME: o.home,
      BB_BASE_IMAGE: BASE_IMAGE,
      BB_PORT: '0',
      FORGE_GITEA_API: o.gitea.apiUrl,
      FORGE_TOKEN: o.token,
      FORGE_WEBHOOK_SECRET: o.secret,
      BB_SWEEP_INTERVAL: '0',
      ...o.env,
    },
    ...(o.backend ? { backend: o.backend } : {}),
    logStream: o.logStream ?? ({ write: () => true } as unknown as NodeJS.WritableStream),
  });
  if (o.hook !== false) o.gitea.addHook({ url: `${orch.url}/webhooks/gitea`, secret: o.secret });
  return orch;
}

/** A bottle's row as the service's own API tells it (live or gone), for the issue `issue`. */
export interface ServiceBottleRow {
  slug: string;
  status: string;
  prNumber: number | null;
  sessionId: string | null;
}
export async function serviceBottle(
  orchUrl: string,
  issue: number,
): Promise<ServiceBottleRow | undefined> {
  type Listed = { bottles: Array<ServiceBottleRow & { issueNumber: number }> };
  const live = (await (await fetch(`${orchUrl}/api/bottles`)).json()) as Listed;
  const gone = (await (await fetch(`${orchUrl}/api/bottles/history`)).json()) as Listed;
  return [...live.bottles, ...gone.bottles].find((b) => b.issueNumber === issue);
}
