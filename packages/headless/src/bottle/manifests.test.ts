import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadAgentManifest, loadBottleManifest, memoryBytes } from './manifests';

let home: string;
const env = () => ({ BB_HOME: home });
const put = (kind: string, file: string, text: string) => {
  mkdirSync(join(home, 'config', kind), { recursive: true });
  writeFileSync(join(home, 'config', kind, file), text);
};
const fail = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return err as Error & { code: string };
  }
  throw new Error('expected an error');
};

beforeEach(() => {
  home = mkdtempSync(join(tmpdir(), 'bb-manifests-'));
});
afterEach(() => rmSync(home, { recursive: true, force: true }));

describe('agent manifests', () => {
  it('loads JSON and YAML, with defaults', () => {
    put(
      'agents',
      'implementer.json',
      JSON.stringify({
        provider: 'claude',
        model: 'claude-x',
        git: { name: 'Implementer', email: 'bot@example.test' },
      }),
    );
    put(
      'agents',
      'demo.yaml',
      'provider: script\nbottles: [default, with-node]\ngit:\n  name: Demo\n  email: demo@example.test\n',
    );
    expect(loadAgentManifest('implementer', env()).manifest).toEqual({
      provider: 'claude',
      model: 'claude-x',
      bottles: ['default'],
      git: { name: 'Implementer', email: 'bot@example.test' },
    });
    expect(loadAgentManifest('demo', env()).manifest.bottles).toEqual(['default', 'with-node']);
  });

  it('names the file, each bad field and the fix', () => {
    put(
      'agents',
      'bad.json',
      JSON.stringify({ provider: 'gpt', git: { name: '', email: 'nope' }, extra: 1 }),
    );
    const err = fail(() => loadAgentManifest('bad', env()));
    expect(err.code).toBe('INVALID_INPUT');
    expect(err.message).toContain(join(home, 'config', 'agents', 'bad.json'));
    expect(err.message).toMatch(/- provider: must be one of claude, codex, pi, script/);
    expect(err.message).toMatch(/- git\.email: must be an email address/);
    expect(err.message).toMatch(/- git\.name: must not be empty/);
    expect(err.message).toMatch(/extra/);
  });

  it('a missing manifest says where to create it; a bad name or bad syntax is refused', () => {
    const missing = fail(() => loadAgentManifest('nobody', env()));
    expect(missing.code).toBe('NOT_FOUND');
    expect(missing.message).toContain(`create ${join(home, 'config', 'agents', 'nobody.json')}`);
    expect(fail(() => loadAgentManifest('../etc/passwd', env())).code).toBe('INVALID_INPUT');
    put('agents', 'broken.json', '{ "provider": ');
    expect(fail(() => loadAgentManifest('broken', env())).message).toMatch(
      /cannot be read as JSON/,
    );
  });
});

describe('bottle manifests', () => {
  it('loads an image bottle with egress, credential references and limits', () => {
    put(
      'bottles',
      'default.json',
      JSON.stringify({
        image: 'bb-base:latest',
        egress: { allow: ['registry.npmjs.org:443', '*.example.test'] },
        credentials: [
          {
            route: '/anthropic',
            upstream: 'https://api.anthropic.com',
            headers: { 'x-api-key': 'env:ANTHROPIC_API_KEY' },
          },
        ],
        resources: { memory: '2g', pids: 512, cpus: 2 },
        env: { NODE_ENV: 'development' },
      }),
    );
    const { manifest } = loadBottleManifest('default', env());
    expect(manifest.credentials[0]!.headers).toEqual({ 'x-api-key': 'env:ANTHROPIC_API_KEY' });
    expect(memoryBytes(manifest.resources.memory)).toBe(2 * 1024 ** 3);
  });

  it('refuses a secret written into the manifest instead of referenced', () => {
    put(
      'bottles',
      'leaky.json',
      JSON.stringify({
        image: 'x',
        credentials: [
          {
            route: '/anthropic',
            upstream: 'https://api.anthropic.com',
            headers: { 'x-api-key': 'sk-ant-123456' },
          },
        ],
      }),
    );
    const err = fail(() => loadBottleManifest('leaky', env()));
    expect(err.message).toMatch(
      /credentials\.0\.headers\.x-api-key: must reference a secret as env:NAME or file:\/path, never hold it/,
    );
    expect(err.message).not.toContain('sk-ant-123456');
  });

  it('needs exactly one of image or dockerfile, and checks limits and hosts', () => {
    put('bottles', 'none.json', JSON.stringify({}));
    expect(fail(() => loadBottleManifest('none', env())).message).toMatch(
      /image: give exactly one of image or dockerfile/,
    );
    put('bottles', 'both.json', JSON.stringify({ image: 'a', dockerfile: 'Dockerfile' }));
    expect(fail(() => loadBottleManifest('both', env())).message).toMatch(/exactly one/);
    put(
      'bottles',
      'limits.json',
      JSON.stringify({
        image: 'a',
        resources: { memory: 'lots', pids: 1 },
        egress: { allow: ['http://x'] },
      }),
    );
    const err = fail(() => loadBottleManifest('limits', env()));
    expect(err.message).toMatch(/resources\.memory/);
    expect(err.message).toMatch(/resources\.pids/);
    expect(err.message).toMatch(/egress\.allow\.0: must be a host/);
  });
});

describe('the example manifests in docs/examples', () => {
  it('are valid', () => {
    const examples = {
      BB_HOME: join(import.meta.dirname, '..', '..', '..', '..', 'docs', 'examples'),
    };
    expect(loadAgentManifest('implementer', examples).manifest.provider).toBe('claude');
    expect(loadAgentManifest('demo', examples).manifest.provider).toBe('script');
    expect(loadBottleManifest('default', examples).manifest.image).toBe('bb-base:latest');
  });
});
