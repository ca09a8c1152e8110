/**
 * @module
 * `@bb/forge/test-server`: the Gitea-compatible test server alone, without the
 * vitest-based conformance suite, for programs (such as `bb demo`) that run it
 * outside a test runner. Loopback only; a double of Gitea, not a forge to use.
 */
export { type AcmeWorldOptions, acmeWorld } from './testing/gitea-server/acme-world';
export { type Delivery, eventHeader } from './testing/gitea-server/hooks';
export type {
  GiteaWorldSeed,
  IssueModel,
  SeedIssue,
  SeedLabel,
  SeedOrg,
  SeedRepo,
  SeedUser,
} from './testing/gitea-server/model';
export { type PushCommitOptions, pushCommit } from './testing/gitea-server/push';
export {
  type ApiExchange,
  createGiteaTestServer,
  GiteaTestServer,
  type GiteaTestServerOptions,
  type NewIssue,
  type TestHookOptions,
} from './testing/gitea-server/server';
