import { type Forge, giteaKind } from '@bb/forge';
import { MemoryForge, type MemoryForgeWorld } from '@bb/forge/testing';
import { loadOrCreateSigningKey, type RunRecordStore } from '@bb/provenance';
import type { EventInbox, ForgeStateStore } from '@bb/state';
import type { OrchestratorOptions } from '../src/index';
import type { FakeRunner } from './fake-runner';

/**
 * The options an orchestrator runs with on no Docker and no network: the forge
 * in memory (`world`, as the member `bb-bot`), SQLite state and inbox, bottles
 * from the runner double, records signed with a key in `home`, and no scanner.
 * Tests and benches add their own timings and capacity.
 */
export function fakeOrchestratorOptions(o: {
  home: string;
  store: ForgeStateStore & EventInbox;
  provenance: RunRecordStore;
  runner: FakeRunner;
  world: MemoryForgeWorld;
  forgeFor?: (owner: string, repo: string) => Forge;
}): OrchestratorOptions {
  return {
    forgeFor:
      o.forgeFor ??
      ((owner, repo) => new MemoryForge({ owner, repo, as: 'bb-bot', world: o.world })),
    token: 'forge-token',
    botLogin: 'bb-bot',
    forge: {
      kind: giteaKind,
      site: giteaKind.fromEnv({ FORGE_GITEA_API: 'http://127.0.0.1:9/api/v1' }),
    },
    store: o.store,
    inbox: o.store,
    runner: o.runner,
    provenance: {
      store: o.provenance,
      key: loadOrCreateSigningKey(o.home),
      scanner: { scanCommits: async () => ({ tool: 'none', scanned: '', findings: [] }) },
      bbVersion: '0.0.0',
      gitCommit: null,
    },
    env: o.runner.env,
  };
}
