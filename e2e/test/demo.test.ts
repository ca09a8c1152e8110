// `bb demo`, the README's first command, through the real binary on a real
// Docker engine: the whole story narrated and verified; `--keep` leaves the
// servers up for a person to look around until Ctrl-C, then cleans up.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { describe, expect, it } from 'vitest';
import { until } from './support';

const docker = await probeDocker();
const BB = fileURLToPath(new URL('../../apps/cli/dist/bin.js', import.meta.url));

function bb(args: string[]) {
  const child = spawn(process.execPath, [BB, ...args], {
    env: { ...process.env, BB_BASE_IMAGE: BASE_IMAGE, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out = { stdout: '', stderr: '' };
  child.stdout.on('data', (d) => {
    out.stdout += d;
  });
  child.stderr.on('data', (d) => {
    out.stderr += d;
  });
  const exit = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return { child, out, exit };
}

describe.skipIf(!docker.ok)('bb demo', () => {
  it('tells the whole story on Docker and verifies the provenance', async () => {
    const run = bb(['demo']);
    expect(await run.exit, `${run.out.stdout}\n${run.out.stderr}`).toBe(0);
    const text = run.out.stdout;
    expect(text).toContain('bottles: docker');
    expect(text).toMatch(/alice files issue #1 .* labelled bot-bottle:demo, assigned to bb-bot/);
    expect(text).toMatch(/bottle demo-[a-z0-9]{5} launched/);
    expect(text).toContain("comment on #1 by bb-bot: Hello! I'm the demo agent");
    expect(text).toMatch(/PR #2: "Add a greeting" from branch bb\/demo-1/);
    expect(text).toMatch(
      /the agent answered: Turn 2 of session [0-9a-f-]+: you asked "alice commented on your PR #2 \(http:\/\/127\.0\.0\.1:\d+\/acme\/widgets\/pulls\/2#issuecomment-\d+\):\s+> Could you make it a little warmer\?"/,
    );
    expect(text).toContain('same session: yes');
    expect(text).toContain('containers left: 0');
    expect(text).toMatch(/Provenance: 2 signed records/);
    expect(text).toMatch(/verification of demo-[a-z0-9]{5}'s chain \(key [0-9a-f]{16}\): OK/);
    // Piped output has no colour codes and no progress noise.
    expect(text).not.toContain('\x1b[');
    const home = /state: (\S+)/.exec(text)![1]!;
    expect(existsSync(home)).toBe(false);
  }, 180_000);

  it('--forge github tells the same story on the GitHub-compatible server, its API and webhooks', async () => {
    const run = bb(['demo', '--forge', 'github']);
    expect(await run.exit, `${run.out.stdout}\n${run.out.stderr}`).toBe(0);
    const text = run.out.stdout;
    expect(text).toContain('A GitHub-compatible server and the orchestrator are up.');
    expect(text).toMatch(/webhook http:\/\/127\.0\.0\.1:\d+\/webhooks\/github/);
    expect(text).toMatch(/PR #2: "Add a greeting" from branch bb\/demo-1/);
    expect(text).toMatch(/\/acme\/widgets\/pull\/2#issuecomment-\d+/);
    expect(text).toContain('same session: yes');
    expect(text).toContain('containers left: 0');
    expect(text).toMatch(/verification of demo-[a-z0-9]{5}'s chain \(key [0-9a-f]{16}\): OK/);
  }, 180_000);

  it('--agent claude tells the same story with the real Claude Code CLI and a scripted model', async (ctx) => {
    const hasAgents = await new Promise<boolean>((r) =>
      spawn('docker', ['image', 'inspect', 'bb-agents:latest'], { stdio: 'ignore' }).once(
        'exit',
        (c) => r(c === 0),
      ),
    );
    if (!hasAgents && process.env['BB_REQUIRE_DOCKER'] === '1')
      throw new Error('bb-agents:latest is missing: run scripts/build-agents-image.sh');
    if (!hasAgents) ctx.skip('bb-agents:latest is missing (scripts/build-agents-image.sh)');
    const run = bb(['demo', '--agent', 'claude']);
    expect(await run.exit, `${run.out.stdout}\n${run.out.stderr}`).toBe(0);
    const text = run.out.stdout;
    expect(text).toMatch(/the agent was the real claude CLI \d+\.\d+\.\d+/);
    expect(text).toContain('model key inside the bottle: no (only the proxy held it)');
    expect(text).toContain('the agent answered: Warmer it is');
    expect(text).toContain('same session: yes');
    expect(text).toMatch(/verification of demo-[a-z0-9]{5}'s chain \(key [0-9a-f]{16}\): OK/);
  }, 180_000);

  it('--keep leaves the dashboard up until Ctrl-C, then cleans up', async () => {
    const run = bb(['demo', '--keep']);
    const dashboard = await until(
      'the demo to finish and print its URLs',
      () => /dashboard: +(http:\/\/\S+)/.exec(run.out.stdout)?.[1],
      180_000,
    );
    const page = await fetch(dashboard);
    expect(page.status).toBe(200);
    expect(await page.text()).toMatch(/class="badge destroyed">destroyed/);
    const home = /state: +(\S+)/.exec(run.out.stdout.split('stay up until Ctrl-C')[1]!)![1]!;
    expect(existsSync(home)).toBe(true);
    run.child.kill('SIGINT');
    expect(await run.exit, `${run.out.stdout}\n${run.out.stderr}`).toBe(0);
    expect(existsSync(home)).toBe(false);
    await expect(fetch(dashboard)).rejects.toThrow();
  }, 200_000);
});
