// forklift finds the fork's forge in the kind registry, as the orchestrator does.
import { defaultBottleBranches, GiteaForge, registerForgeKind } from '@bb/forge';
import { MemoryForge, MemoryForgeWorld, memoryWebhooks } from '@bb/forge/testing';
import { describe, expect, it } from 'vitest';
import { forkForge } from '../src/run';

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

  it('refuses a kind nobody registered, naming the ones there are', () => {
    expect(() => forkForge({ env: { FORKLIFT_FORGE_KIND: 'gitlab' }, token: 't' })).toThrow(
      /gitea/,
    );
  });
});
