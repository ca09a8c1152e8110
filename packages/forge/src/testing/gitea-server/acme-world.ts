import type { GiteaWorldSeed, SeedIssue, SeedRepo, SeedUser } from './model';

/** What a test adds to {@link acmeWorld}. */
export interface AcmeWorldOptions {
  /** alice's token (she has none by default). */
  aliceToken?: string;
  /** More users, besides alice and the bot. */
  users?: SeedUser[];
  /** More users who may write to acme/widgets, besides the bot. */
  collaborators?: string[];
  /** Who administers acme/widgets (nobody but its owner by default). */
  admins?: string[];
  /** The files of acme/widgets' first commit. */
  files?: Record<string, string>;
  /** More repositories. */
  repos?: SeedRepo[];
  issues?: SeedIssue[];
}

/**
 * The world most tests start from: alice, of the org acme, files issues in
 * acme/widgets; the bot `bb-claude`, of the agent org bot-bottle, may write to it
 * with `botToken`.
 */
export function acmeWorld(botToken: string, o: AcmeWorldOptions = {}): GiteaWorldSeed {
  return {
    users: [
      { login: 'alice', ...(o.aliceToken ? { tokens: [o.aliceToken] } : {}) },
      { login: 'bb-claude', tokens: [botToken] },
      ...(o.users ?? []),
    ],
    orgs: [
      { name: 'acme', members: ['alice'] },
      { name: 'bot-bottle', members: ['bb-claude'] },
    ],
    repos: [
      {
        owner: 'acme',
        name: 'widgets',
        collaborators: ['bb-claude', ...(o.collaborators ?? [])],
        ...(o.admins ? { admins: o.admins } : {}),
        ...(o.files ? { files: o.files } : {}),
      },
      ...(o.repos ?? []),
    ],
    ...(o.issues ? { issues: o.issues } : {}),
  };
}
