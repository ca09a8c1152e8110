import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_ALLOW, modelRouteFromEnv, readScript } from '../src/agent';
import { checkTree, globMatch, isCiPath, parseForkMd, unquotePath } from '../src/verify';

const dir = mkdtempSync(join(tmpdir(), 'forklift-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('FORK.md and protected paths', () => {
  it('reads the test command and every protect line, and nothing else', () => {
    expect(
      parseForkMd(
        '# Fork\n\ntest: make check\nprotect: tests/**\nProtect:  docs/*.md \nnot a protect: x\n',
      ),
    ).toEqual({ test: 'make check', protect: ['tests/**', 'docs/*.md'] });
    expect(parseForkMd('no rules here')).toEqual({ test: undefined, protect: [] });
  });

  it('globs: ** crosses directories, * does not, dots are literal', () => {
    expect(globMatch('.github/**', '.github/workflows/ci.yml')).toBe(true);
    expect(globMatch('tests/*.sh', 'tests/a.sh')).toBe(true);
    expect(globMatch('tests/*.sh', 'tests/sub/a.sh')).toBe(false);
    expect(globMatch('.gitlab-ci.yml', 'xgitlab-ci.yml')).toBe(false);
    expect(globMatch('Jenkinsfile', 'src/Jenkinsfile')).toBe(false);
  });

  it('CI paths cover the forges and CI services that run on a push, whatever the case', () => {
    for (const p of [
      '.gitea/workflows/a.yml',
      '.github/workflows/a.yml',
      '.GitHub/workflows/a.yml',
      '.github',
      '.forgejo/workflows/a.yml',
      '.gitlab-ci.yml',
      '.woodpecker/build.yml',
      '.circleci/config.yml',
      'Jenkinsfile',
      '.gitmodules',
      '.github/ev\nil.yml',
    ])
      expect(isCiPath(p), p).toBe(true);
    expect(isCiPath('src/main.ts')).toBe(false);
    expect(isCiPath('docs/.github.md')).toBe(false);
  });

  it('unquotes paths as git quotes them', () => {
    expect(unquotePath('plain/path')).toBe('plain/path');
    expect(unquotePath('"a\\nb"')).toBe('a\nb');
    expect(unquotePath('"\\303\\251.txt"')).toBe('é.txt');
    expect(globMatch('tests/**', 'tests/a\nb.sh')).toBe(true);
  });
});

describe("checkTree: nothing in a CI or protected path is the agent's", () => {
  const repo = join(dir, 'r');
  const g = (...a: string[]) =>
    execFileSync('git', ['-C', repo, ...a], {
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: 'a',
        GIT_AUTHOR_EMAIL: 'a@x',
        GIT_COMMITTER_NAME: 'a',
        GIT_COMMITTER_EMAIL: 'a@x',
      },
    })
      .toString()
      .trim();
  const put = (files: Record<string, string | null>, msg: string) => {
    for (const [f, c] of Object.entries(files)) {
      if (c === null) rmSync(join(repo, f), { force: true });
      else {
        mkdirSync(join(repo, f, '..'), { recursive: true });
        writeFileSync(join(repo, f), c);
      }
    }
    g('add', '-A');
    g('commit', '-qm', msg, '--allow-empty');
    return g('rev-parse', 'HEAD');
  };
  let base = '';
  let fork = '';
  let upstream = '';
  /** The agent's result: a merge of both with `files` on top. */
  const result = (files: Record<string, string | null>) => {
    g('checkout', '-q', '-B', 'agent', fork);
    g('merge', '-q', '--no-edit', upstream);
    return put(files, 'agent');
  };
  const check = (merged: string, protect: string[] = []) =>
    checkTree(join(repo, '.git'), { fork, upstream, merged }, protect);

  it('refuses new, changed, renamed, re-cased, newline-named and deleted workflow files; takes either side', async () => {
    execFileSync('git', ['init', '-q', '-b', 'main', repo]);
    base = put(
      { '.github/workflows/ci.yml': 'on: push\n', 'a.txt': 'a\n', 'tests/t.sh': 'true\n' },
      'base',
    );
    fork = put({ 'fork.txt': 'f\n' }, 'fork');
    g('checkout', '-q', '-b', 'up', base);
    upstream = put({ '.github/workflows/ci.yml': 'on: [push]\n', 'up.txt': 'u\n' }, 'upstream');
    g('checkout', '-q', 'main');
    // The plain merge: upstream's workflow, nothing of the agent's.
    expect((await check(result({}))).violations).toEqual([]);
    const bads: Array<Record<string, string | null>> = [
      { '.github/workflows/evil.yml': 'run: steal\n' },
      { '.github/workflows/ci.yml': 'run: steal\n' },
      { '.GitHub/workflows/x.yml': 'run: steal\n' },
      { '.github/workflows/ev\nil.yml': 'run: steal\n' },
      { '.github/workflows/ev\u2028il.yml': 'run: steal\n' },
      { '.github/workflows/ci.yml': null },
      { '.gitmodules': '[submodule "x"]\n\tpath = x\n\turl = http://127.0.0.1:1/x\n' },
    ];
    for (const bad of bads) {
      const v = (await check(result(bad))).violations;
      expect(v.length, JSON.stringify(bad)).toBeGreaterThan(0);
    }
    // Protected by FORK.md: the agent may not write tests/, even to make them pass.
    expect((await check(result({ 'tests/t.sh': 'exit 0\n' }), ['tests/**'])).violations).toEqual([
      'tests/t.sh',
    ]);
    // Nor may it undo a side's change (here upstream's new workflow, back to the base's).
    expect((await check(result({ '.github/workflows/ci.yml': 'on: push\n' }))).violations).toEqual([
      '.github/workflows/ci.yml',
    ]);
    // A directory the protected path lives in cannot become a link to other bytes: neither
    // one that exists (the file rule sees it go) nor one a glob names ahead of time.
    const linked = result({});
    g('rm', '-rq', 'tests');
    mkdirSync(join(repo, 'evil'), { recursive: true });
    writeFileSync(join(repo, 'evil', 't.sh'), 'exit 0\n');
    execFileSync('ln', ['-s', 'evil', join(repo, 'tests')]);
    execFileSync('ln', ['-s', 'evil', join(repo, 'config')]);
    g('add', '-A');
    g('commit', '-qm', 'link');
    expect(linked).toBeTruthy();
    const head = g('rev-parse', 'HEAD');
    expect((await check(head, ['tests/**'])).violations).toEqual(['tests/t.sh']);
    expect((await check(head, ['config/**'])).violations).toEqual(['config']);
    // A protect glob that matches nothing yet still guards its directory.
    const fresh = result({ 'config/brand.json': '{}\n' });
    expect((await check(fresh, ['config/**'])).violations).toEqual(['config/brand.json']);
    // A mode change is a change.
    const m = result({});
    g('update-index', '--chmod=+x', 'a.txt');
    expect((await check(m, ['a.txt'])).violations).toEqual([]);
    g('commit', '-qm', 'mode');
    expect((await check(g('rev-parse', 'HEAD'), ['a.txt'])).violations).toEqual(['a.txt']);
  });
});

describe('agent choice', () => {
  it('claude speaks Anthropic with x-api-key; codex OpenAI with a bearer header the proxy alone holds', () => {
    expect(modelRouteFromEnv('claude', { ANTHROPIC_API_KEY: 'k' })).toEqual({
      route: {
        kind: 'anthropic',
        upstream: 'https://api.anthropic.com',
        headers: { 'x-api-key': 'env:ANTHROPIC_API_KEY' },
      },
      secrets: {},
    });
    const codex = modelRouteFromEnv('codex', {
      OPENAI_API_KEY: 'sk-1',
      FORKLIFT_MODEL_URL: 'http://127.0.0.1:9',
    });
    expect(codex.route).toEqual({
      kind: 'openai',
      upstream: 'http://127.0.0.1:9',
      headers: { authorization: 'env:FORKLIFT_MODEL_BEARER' },
    });
    expect(codex.secrets).toEqual({ FORKLIFT_MODEL_BEARER: 'Bearer sk-1' });
    expect(modelRouteFromEnv('pi', { OPENAI_API_KEY: 'sk-1' }).route.kind).toBe('openai');
  });

  it('names the missing key or the bad URL', () => {
    expect(() => modelRouteFromEnv('claude', {})).toThrow(/needs ANTHROPIC_API_KEY/);
    expect(() =>
      modelRouteFromEnv('claude', { ANTHROPIC_API_KEY: 'k', FORKLIFT_MODEL_URL: 'nope' }),
    ).toThrow(/FORKLIFT_MODEL_URL "nope" is not a URL/);
  });

  it('a script must be a JSON array of script-agent steps', () => {
    const f = join(dir, 's.json');
    writeFileSync(f, '[{"do":"sh","cmd":"true"}]');
    expect(readScript(f)).toEqual([{ do: 'sh', cmd: 'true' }]);
    writeFileSync(f, '{"do":"sh"}');
    expect(() => readScript(f)).toThrow(/not a list of script-agent steps/);
    writeFileSync(f, '[{"do":"fly"}]');
    expect(() => readScript(f)).toThrow(/not a list of script-agent steps/);
    writeFileSync(f, 'not json');
    expect(() => readScript(f)).toThrow(/--script .*s\.json/);
  });

  it('the default allowlist is registries only: no forge, no code host, no wildcard', () => {
    expect(DEFAULT_ALLOW).toContain('registry.npmjs.org');
    expect(DEFAULT_ALLOW.some((h) => /github|gitlab|gitea|\*/.test(h))).toBe(false);
  });
});
