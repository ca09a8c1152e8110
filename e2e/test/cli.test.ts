// The `bb` binary on a real Docker engine: headless start and resume return the
// agent's exit code; `bb orchestrate start|resume|status` and `bb provenance`
// drive a forge bottle against the Gitea-compatible test server.
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createGiteaTestServer, type GiteaTestServer } from '@bb/forge/test-server';
import { DockerBackend, HOME_LABEL, homeLabel } from '@bb/headless';
import { BASE_IMAGE, probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeHome, prSteps, scriptAgent } from './support';

const docker = await probeDocker();
const BB = fileURLToPath(new URL('../../apps/cli/dist/bin.js', import.meta.url));
const TOKEN = 'bb-claude-token-cli-4242';

function bb(args: string[], env: Record<string, string>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const child = spawn(process.execPath, [BB, ...args], {
      env: { PATH: process.env['PATH'], BB_BASE_IMAGE: BASE_IMAGE, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

describe.skipIf(!docker.ok)('the bb binary on real Docker', () => {
  let home: string;
  let gitea: GiteaTestServer;
  const backend = new DockerBackend();

  beforeAll(async () => {
    const agent = (turns: unknown[]) => scriptAgent(turns, 'Agent');
    home = makeHome('bb-cli-e2e-', {
      local: agent([
        {
          steps: [
            { do: 'write', path: 'a.txt', content: 'a\n' },
            { do: 'commit', message: 'A' },
            { do: 'exit', code: 3 },
          ],
        },
        { steps: [{ do: 'write', path: 'b.txt', content: 'b\n' }] },
      ]),
      forgey: agent([
        {
          steps: [
            { do: 'read_issue' },
            ...prSteps({ path: 'f.txt', content: 'f\n', message: 'F', title: 'Add f', body: '' }),
            { do: 'done', status: 'success', summary: 'Added f.' },
          ],
        },
        {
          steps: [
            { do: 'comment', body: 'Turn {{turn}}: {{prompt}}' },
            { do: 'done', status: 'success', summary: 'Answered.' },
          ],
        },
      ]),
    });
    gitea = await createGiteaTestServer({
      world: {
        users: [
          { login: 'alice', tokens: ['alice-token-1234567890'] },
          { login: 'bb-claude', tokens: [TOKEN] },
        ],
        orgs: [{ name: 'bot-bottle', members: ['bb-claude'] }],
        repos: [
          { owner: 'alice', name: 'app', collaborators: ['bb-claude'], admins: ['bb-claude'] },
        ],
      },
    });
  });
  afterAll(async () => {
    for (const c of await backend.list({ [HOME_LABEL]: homeLabel({ BB_HOME: home }) }))
      await backend.destroy(c.id);
    await gitea?.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('bb start and bb resume exit with the agent code and continue the same bottle', async () => {
    const first = await bb(['start', 'local', '--headless', '--prompt', 'make a'], {
      BB_HOME: home,
    });
    expect(first.code).toBe(3);
    const slug = /bb resume (local-[a-z0-9]{5}) --headless/.exec(first.stderr)?.[1];
    expect(slug).toBeDefined();
    // Not a terminal: no progress lines.
    expect(first.stderr).not.toMatch(/\[ *\d+\.\d s\]/);
    const second = await bb(['resume', slug!, '--headless', '--prompt', 'make b'], {
      BB_HOME: home,
    });
    expect(second.code).toBe(0);
    expect(second.stderr).toContain(`bottle ${slug} is frozen again (agent exited 0)`);
    const again = await bb(['resume', 'local-zzzzz', '--headless', '--prompt', 'x'], {
      BB_HOME: home,
    });
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/no bottle local-zzzzz/);
  }, 120_000);

  it('bb orchestrate start, status, resume and bb provenance on a forge issue', async () => {
    const n = gitea.createIssue('alice', 'alice/app', { title: 'Add f', body: 'Please.' });
    const forgeEnv = {
      BB_HOME: home,
      FORGE_GITEA_API: gitea.apiUrl,
      FORGE_TOKEN: TOKEN,
      FORGE_OWNER: 'alice',
      FORGE_REPO: 'app',
      FORGE_ISSUE_NUMBER: String(n),
      FORGE_BOT_LOGIN: 'bb-claude',
    };
    const start = await bb(
      [
        'orchestrate',
        'start',
        '--agent',
        'forgey',
        '--prompt',
        'go',
        '--label',
        'bot-bottle:forgey',
      ],
      forgeEnv,
    );
    expect(start.code).toBe(0);
    // --label is the forge label, put on the issue before the bottle starts.
    expect(gitea.issue('alice/app', n).labels).toEqual(['bot-bottle:forgey']);
    const result = JSON.parse(start.stdout) as {
      slug: string;
      status: string;
      done: unknown;
      prs: number[];
    };
    expect(result).toMatchObject({
      status: 'frozen',
      done: { status: 'success', summary: 'Added f.' },
    });
    expect(result.prs).toHaveLength(1);
    expect(start.stdout + start.stderr).not.toContain(TOKEN);

    const status = await bb(['orchestrate', 'status', '--json'], forgeEnv);
    const rows = (JSON.parse(status.stdout) as { bottles: Array<Record<string, unknown>> }).bottles;
    expect(rows.find((b) => b['slug'] === result.slug)).toMatchObject({
      status: 'frozen',
      issue: n,
      pr: result.prs[0],
    });

    const resumed = await bb(
      ['orchestrate', 'resume', '--slug', result.slug, '--prompt', 'thanks'],
      forgeEnv,
    );
    expect(resumed.code).toBe(0);
    expect(gitea.issue('alice/app', n).comments.at(-1)?.body).toBe('Turn 2: thanks');

    const verify = await bb(['provenance', 'verify', result.slug], { BB_HOME: home });
    expect(verify.code).toBe(0);
    expect(verify.stdout).toContain(`2 records of ${result.slug}: OK`);
    const show = await bb(['provenance', 'show', result.slug, '--json'], { BB_HOME: home });
    const records = JSON.parse(show.stdout) as Array<{ record: { turn: number } }>;
    expect(records.map((r) => r.record.turn)).toEqual([1, 2]);
  }, 120_000);
});
