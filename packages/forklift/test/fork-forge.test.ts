// forklift finds the fork's forge in the kind registry, as the orchestrator does.
import { defaultBottleBranches, GiteaForge, registerForgeKind } from '@bb/forge';
import { MemoryForge, MemoryForgeWorld, memoryWebhooks } from '@bb/forge/testing';
import { describe, expect, it } from 'vitest';
import { forkForge, parseRemote } from '../src/remotes';

const origin = {
  url: 'https://lab.example/acme/app.git',
  webBase: 'https://lab.example',
  owner: 'acme',
  repo: 'app',
};

describe('the fork’s forge', () => {
  it('is Gitea at the origin’s web root by default, or where FORKLIFT_API says', () => {
    const byRemote = forkForge({ env: {}, token: 't' })(origin);
    expect(byRemote).toBeInstanceOf(GiteaForge);
    expect((byRemote as GiteaForge).client.apiBase.href).toBe('https://lab.example/api/v1');
    const byApi = forkForge({ env: { FORKLIFT_API: 'https://api.lab.example/v1' }, token: 't' })(
      origin,
    );
    expect((byApi as GiteaForge).client.apiBase.href).toMatch(/^https:\/\/api.lab.example\/v1/);
  });

  it('is any registered kind FORKLIFT_FORGE_KIND names, found at the remote by its siteAt', () => {
    const world = new MemoryForgeWorld();
    const seen: string[] = [];
    registerForgeKind({
      name: 'forklift-test',
      summary: 'a kind registered by this test',
      fromEnv: () => {
        throw new Error('not configured by variables');
      },
      siteAt: (webBase) => {
        seen.push(webBase);
        return {
          forgeFor: (t: { owner: string; repo: string }) =>
            new MemoryForge({ ...t, as: 'bot', world }),
        } as never;
      },
      webhook: { ...memoryWebhooks, path: '/webhooks/forklift-test' },
      ...defaultBottleBranches,
    });
    const forge = forkForge({ env: { FORKLIFT_FORGE_KIND: 'forklift-test' }, token: 't' })(origin);
    expect(forge).toBeInstanceOf(MemoryForge);
    expect(seen).toEqual(['https://lab.example']);
  });

  it('is the kind that owns the remote host when no variable names one', () => {
    const world = new MemoryForgeWorld();
    registerForgeKind({
      name: 'forklift-hosted',
      summary: 'a hosted forge registered by this test',
      fromEnv: () => {
        throw new Error('not configured by variables');
      },
      ownsUrl: (webBase) => new URL(webBase).host === 'code.hosted.example',
      siteAt: () =>
        ({
          forgeFor: (t: { owner: string; repo: string }) =>
            new MemoryForge({ ...t, as: 'bot', world }),
        }) as never,
      webhook: { ...memoryWebhooks, path: '/webhooks/forklift-hosted' },
      ...defaultBottleBranches,
    });
    const hosted = parseRemote('origin', 'git@code.hosted.example:bot/widgets.git');
    expect(forkForge({ env: {}, token: 't' })(hosted)).toBeInstanceOf(MemoryForge);
    // Another host is still the default kind's; a variable still wins.
    expect(forkForge({ env: {}, token: 't' })(origin)).toBeInstanceOf(GiteaForge);
    expect(() => forkForge({ env: { FORGE_KIND: 'gitea' }, token: 't' })(hosted)).not.toThrow();
    expect(forkForge({ env: { FORGE_KIND: 'gitea' }, token: 't' })(hosted)).toBeInstanceOf(
      GiteaForge,
    );
  });

  it('refuses a kind nobody registered, naming the ones there are', () => {
    expect(() => forkForge({ env: { FORKLIFT_FORGE_KIND: 'gitlab' }, token: 't' })).toThrow(
      /gitea/,
    );
  });
});
