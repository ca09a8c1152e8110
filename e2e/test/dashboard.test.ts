// The dashboard in real headless Chromium (Debian's, driven by playwright-core):
// it shows a running bottle with its issue link, refreshes itself until the
// bottle is frozen, and links each run to its provenance verification.
// Screenshots are kept in test-artifacts/dashboard/.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend, HOME_LABEL, homeLabel } from '@bb/headless';
import type { RunningOrchestrator } from '@bb/service';
import { probeDocker } from '@bb/tooling/docker';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  fileIssue,
  forgeWorld,
  makeHome,
  probeChromium,
  prSteps,
  scriptAgent,
  serveFor,
} from './support';

const docker = await probeDocker();
const browserProbe = probeChromium();
const TOKEN = 'bb-claude-token-dashboard-8080';
const SECRET = 'dashboard-webhook-secret';
const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/dashboard/', import.meta.url));

describe.skipIf(!docker.ok || !browserProbe.ok)('the dashboard in headless Chromium', () => {
  let home: string;
  let gitea: GiteaTestServer;
  let orch: RunningOrchestrator;
  let browser: Browser;
  const backend = new DockerBackend();

  beforeAll(async () => {
    home = makeHome('bb-dash-', {
      implementer: scriptAgent([
        {
          steps: [
            { do: 'read_issue' },
            { do: 'sleep', ms: 4000 },
            ...prSteps({ path: 'a.txt', content: 'a\n', message: 'A', title: 'Add a', body: '' }),
            { do: 'done', status: 'success', summary: 'Added a.' },
          ],
        },
      ]),
    });
    gitea = await createGiteaTestServer({
      world: forgeWorld(TOKEN),
    });
    orch = await serveFor({ home, gitea, token: TOKEN, secret: SECRET, backend });
    browser = await chromium.launch({
      executablePath: browserProbe.path,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    mkdirSync(ARTIFACTS, { recursive: true });
  });

  afterAll(async () => {
    await browser?.close();
    await orch?.close();
    await gitea?.close();
    for (const c of await backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) }))
      await backend.destroy(c.id);
    rmSync(home, { recursive: true, force: true });
  });

  it('shows the running bottle, refreshes to frozen, and links the run to its verification', async () => {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    await page.goto(`${orch.url}/`);
    expect(await page.locator('#bottles').textContent()).toContain('No bottles yet');

    const n = fileIssue(gitea, 'implementer', 'Add a', 'Please add a.');
    // The page reloads itself; no reload from the test.
    const running = page.locator('#bottles tr.status-running');
    await running.waitFor({ timeout: 30_000 });
    const slug = await running.getAttribute('data-slug');
    expect(slug).toMatch(/^implementer-/);
    expect(await running.locator('a').first().getAttribute('href')).toBe(
      `${gitea.apiUrl.replace(/\/api\/v1$/, '')}/acme/widgets/issues/${n}`,
    );
    await page.screenshot({ path: join(ARTIFACTS, 'running.png'), fullPage: true });

    const frozen = page.locator(`#bottles tr[data-slug="${slug}"].status-frozen`);
    await frozen.waitFor({ timeout: 60_000 });
    expect(await frozen.textContent()).toMatch(/#\d+/);
    const run = page.locator('#runs tr[data-run]').first();
    expect(await run.textContent()).toContain('success');
    expect(await run.textContent()).toContain('Added a.');
    await page.screenshot({ path: join(ARTIFACTS, 'frozen.png'), fullPage: true });

    const verify = await run.getByRole('link', { name: 'verify' }).getAttribute('href');
    const res = await page.request.get(`${orch.url}${verify}`);
    expect(res.ok()).toBe(true);
    expect(await res.json()).toMatchObject({ record: { ok: true }, chain: { ok: true } });
  }, 120_000);
});
