/**
 * @module
 * `@bb/forge/testing`: what a forge implementer and a forge user test with.
 *
 * - `describeForgeConformance(name, { create })`: the behaviour suite every
 *   `Forge` subclass must pass (vitest, an optional peer dependency).
 * - `MemoryForge`: a complete in-memory forge.
 * - `createGiteaTestServer({ world })`: a Gitea-compatible server on loopback
 *   (REST subset, git smart HTTP via `git http-backend`, signed webhooks).
 * - `createGitHubTestServer({ world })`: a GitHub-compatible server on loopback
 *   (REST v3 subset in GitHub's published shapes, git smart HTTP), on the same world.
 */

export * from '../test-server';
export {
  describeForgeConformance,
  type ForgeConformanceOptions,
  type ForgeConformanceWorld,
  type WebhookFixture,
} from './conformance';
export {
  MEMORY_SIGNATURE_HEADER,
  MemoryForge,
  MemoryForgeWorld,
  memoryWebhooks,
} from './memory-forge';
