// An orchestrator for the benches: real SQLite state and inbox, bottles from the
// runner double (no Docker), a forge in memory that counts its calls.

import { createServer, type Server } from 'node:http';
import { giteaKind } from '@bb/forge';
import { MemoryForgeWorld } from '@bb/forge/testing';
import type { RunRecordStore } from '@bb/provenance';
import type { EventInbox, ForgeStateStore } from '@bb/state';
import { createWebhookListener, Orchestrator, type OrchestratorOptions } from '../src/index';
import { fakeOrchestratorOptions } from '../test/fake-orchestrator';
import { FakeRunner } from '../test/fake-runner';

export function benchOrchestrator(
  store: ForgeStateStore & EventInbox,
  runs: RunRecordStore,
  home: string,
  over: Partial<OrchestratorOptions> = {},
) {
  const world = new MemoryForgeWorld();
  world.addMember('bot-bottle', 'bb-bot');
  const runner = new FakeRunner(home);
  const orch = new Orchestrator({
    ...fakeOrchestratorOptions({
      home,
      store,
      provenance: runs,
      runner,
      world,
    }),
    capacity: { memoryBudget: 1024 ** 4 },
    ...over,
  });
  return { orch, runner, world };
}

/** The production endpoint on node:http over `orch.accept`, counting what it accepted. */
export function orchestratorEndpoint(
  orch: Orchestrator,
  secret: string,
): { server: Server; accepted: () => number } {
  let accepted = 0;
  const server = createServer(
    createWebhookListener({
      scheme: giteaKind.webhook,
      secrets: [secret],
      accept: async (e) => {
        const isNew = await orch.accept(e);
        if (isNew) accepted++;
        return isNew;
      },
    }),
  );
  return { server, accepted: () => accepted };
}
