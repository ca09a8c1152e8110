/**
 * @module
 * `@bb/forge`: the forge abstraction bot-bottle talks through.
 *
 * - {@link Forge}: the abstract class a forge implements (issues, PRs, comments,
 *   org membership, webhook verification and normalisation to {@link ForgeEvent}s).
 * - {@link ScopedForge}: one bottle's write scope around any forge.
 * - {@link GiteaForge} and {@link GiteaClient}: Gitea (and Forgejo).
 * - {@link evaluateTargeting}: which issues launch which agent.
 *
 * Test helpers and the conformance suite: `@bb/forge/testing`.
 */
export {
  type CommentCreated,
  commentCreatedKey,
  type ForgeEvent,
  type ForgeEventKind,
  header,
  type IgnoredEvent,
  type IssueClosed,
  type IssueRef,
  type IssueTargetingChanged,
  type ParsedWebhook,
  type PrClosed,
  type PrOpened,
  type PrRef,
  type PrReopened,
  type PrSynchronized,
  type ReviewSubmitted,
  type WebhookHeaders,
} from './events';
export { Forge, type GitRemote } from './forge';
export {
  closeGiteaPools,
  GiteaClient,
  type GiteaClientOptions,
  type GiteaRequest,
  type GiteaResponse,
} from './gitea/client';
export { GiteaForge, type GiteaForgeOptions } from './gitea/gitea-forge';
export { GITEA_HOOK_EVENTS, GiteaSite, giteaKind, legacyForgeWiring } from './gitea/kind';
export { parseGiteaWebhook, verifyGiteaWebhook } from './gitea/webhooks';
export {
  APP_PERMISSIONS,
  BOTTLE_PERMISSIONS,
  type ExpiringToken,
  GITHUB_APP_ID_VAR,
  GITHUB_APP_INSTALLATION_VAR,
  GITHUB_APP_KEY_VAR,
  GitHubApp,
  type GitHubAppOptions,
  gitHubAppFromEnv,
} from './github/app';
export { type GitHubClient, type GitHubClientOptions, gitHubClient } from './github/client';
export { GitHubForge, type GitHubForgeOptions } from './github/github-forge';
export {
  GITHUB_API_VAR,
  GITHUB_HOOK_EVENTS,
  GITHUB_WEB_VAR,
  GitHubSite,
  githubKind,
} from './github/kind';
export { parseGitHubWebhook, verifyGitHubWebhook } from './github/webhooks';
export {
  BOTTLE_BRANCH,
  checkBottleBranch,
  checkSiteEnv,
  defaultBottleBranches,
  type ForgeKind,
  ForgeKindRegistry,
  type ForgeSite,
  type HookRequest,
  type RepoName,
  type SiteCheck,
  type SiteCredentials,
  siteEnvPrefix,
  type WebhookScheme,
  type WebTarget,
} from './kind';
export { forgeKinds, registerForgeKind } from './kinds';
export {
  ForgeScopeError,
  type ForgeScopeErrorData,
  ScopedForge,
  type ScopedForgeOptions,
  type ScopedOp,
} from './scoped-forge';
export {
  AGENT_LABEL_PREFIX,
  BOTTLE_LABEL_PREFIX,
  checkName,
  evaluateTargeting,
  NAME_PATTERN,
  type TargetingInput,
  type TargetingOptions,
  type TargetingResult,
} from './targeting';
export {
  type BranchRef,
  type Comment,
  CommentSchema,
  type Issue,
  IssueSchema,
  type Label,
  LabelSchema,
  type OpenPrInput,
  OpenPrInputSchema,
  PERMISSIONS,
  type Permission,
  type PullRequest,
  PullRequestSchema,
  type Reaction,
  type RepoRef,
  type Review,
  type ReviewComment,
  ReviewCommentSchema,
  ReviewSchema,
  type User,
  UserSchema,
} from './types';
