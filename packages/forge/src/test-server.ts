/**
 * @module
 * `@bb/forge/test-server`: the Gitea- and GitHub-compatible test servers alone,
 * without the vitest-based conformance suite, for programs (such as `bb demo`) that
 * run them outside a test runner. Loopback only; doubles, not forges to use.
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
export {
  type AppModel,
  createGitHubTestServer,
  type GitHubAppSeed,
  type GitHubDelivery,
  type GitHubExchange,
  type GitHubFault,
  type GitHubHook,
  GitHubTestServer,
  type GitHubTestServerOptions,
  type InstallationModel,
  type InstallationTokenModel,
} from './testing/github-server/server';
