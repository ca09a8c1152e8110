import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_ALLOW, modelRouteFromEnv, readScript } from '../src/agent';
import { CI_PATHS, globMatch, parseForkMd } from '../src/verify';

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

  it('CI paths cover the forges and CI services that run on a push', () => {
    for (const p of [
      '.gitea/workflows/a.yml',
      '.github/workflows/a.yml',
      '.forgejo/workflows/a.yml',
      '.gitlab-ci.yml',
      '.woodpecker/build.yml',
      '.circleci/config.yml',
      'Jenkinsfile',
    ])
      expect(
        CI_PATHS.some((g) => globMatch(g, p)),
        p,
      ).toBe(true);
    expect(CI_PATHS.some((g) => globMatch(g, 'src/main.ts'))).toBe(false);
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
