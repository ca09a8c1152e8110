import { BbError } from '@bb/errors';
import type {
  Comment,
  Issue,
  OpenPrInput,
  Permission,
  PullRequest,
  Reaction,
  Review,
  ReviewComment,
} from './types';

/** Where branches are pushed, and the HTTP headers that authenticate the push. */
export interface GitRemote {
  url: string;
  /** Sent by git as `http.extraHeader`; holds the credential, so never log it. */
  headers: Record<string, string>;
}

/**
 * A forge (Gitea, GitHub, ...) as bot-bottle uses it, bound to one repository.
 *
 * Implementations throw `BbError`s: `NOT_FOUND` for a missing issue or PR,
 * `UNAUTHORIZED` for a bad token, `FORGE_UNAVAILABLE` when the forge cannot be
 * reached or keeps failing, `INVALID_INPUT` for bad arguments. Prove an
 * implementation with `describeForgeConformance` from `@bb/forge/testing`.
 *
 * Webhooks are not a repository's business: a `ForgeKind`'s `webhook` scheme
 * verifies and reads them.
 */
export abstract class Forge {
  /** A short name of the forge kind, e.g. `gitea`. */
  abstract readonly kind: string;
  abstract readonly owner: string;
  abstract readonly repo: string;

  /** An issue (or a PR seen as an issue, with `isPullRequest: true`). */
  abstract readIssue(n: number): Promise<Issue>;
  /** A pull request; `NOT_FOUND` when `n` is a plain issue. */
  abstract readPr(n: number): Promise<PullRequest>;
  /** The conversation comments of an issue or PR, oldest first. */
  abstract readComments(n: number): Promise<Comment[]>;
  /**
   * The commit the repository's default branch is at, when the forge's API tells
   * it cheaply; undefined when it cannot (the caller asks the forge's git). A
   * launch uses it to skip a fetch its mirror does not need. @default undefined
   */
  async defaultBranchHead(): Promise<string | undefined> {
    return undefined;
  }
  /**
   * Every open issue of the repository (PRs excluded), newest first. The
   * orchestrator's reconcile sweep uses it to find targeted issues whose webhook
   * never arrived.
   */
  abstract listOpenIssues(): Promise<Issue[]>;
  /** Post a comment as the token's user. */
  abstract postComment(n: number, body: string): Promise<Comment>;
  /** Replace the body of an issue or PR. */
  abstract updateDescription(n: number, body: string): Promise<void>;
  /** Open a PR from an already pushed branch. */
  abstract openPr(input: OpenPrInput): Promise<PullRequest>;
  /**
   * Whether `user` is a member of `org`. Resolves `false` only when the forge
   * says "not a member"; throws when it cannot tell (e.g. the token's user may
   * not see the org's members).
   */
  abstract isOrgMember(org: string, user: string): Promise<boolean>;
  /** The PR that resolves issue `n`, if any. */
  abstract getPrForIssue(n: number): Promise<number | undefined>;
  /** The submitted reviews of PR `n`, oldest first (drafts excluded). `NOT_FOUND` for a missing PR. */
  abstract readReviews(n: number): Promise<Review[]>;
  /** The inline comments of review `reviewId` of PR `n`. `NOT_FOUND` for a missing PR or review. */
  abstract readReviewComments(n: number, reviewId: number): Promise<ReviewComment[]>;
  /**
   * What `user` may do in this repository. Throws `FORBIDDEN` when the token may
   * not ask (Gitea answers only to repository admins), so "cannot tell" is never
   * mistaken for `none`; `NOT_FOUND` for an unknown user.
   */
  abstract permissionOf(user: string): Promise<Permission>;

  /**
   * Leave `reaction` on a comment (`{ comment: id }`), a submitted review
   * (`{ review: id, pr: n }`) or an issue or PR itself (`{ issue: n }`), once.
   * Resolves `false` when this forge has no reactions (the default).
   */
  async react(
    _target: { comment: number } | { issue: number } | { review: number; pr: number },
    _reaction: Reaction,
  ): Promise<boolean> {
    return false;
  }

  /**
   * Add labels (by name) to issue `n`, as an operator's tool does when it
   * starts a bottle by hand. Resolves `false` when this forge cannot (the default).
   */
  async addLabels(_n: number, _names: string[]): Promise<boolean> {
    return false;
  }

  /**
   * The repository's git remote and push credentials, for the forge sidecar.
   * `undefined` when this forge cannot push (the default).
   */
  gitRemote(): GitRemote | undefined {
    return undefined;
  }

  /**
   * The PRs from branch `head` of this repository into `base`, newest first: the
   * open ones, or `state: 'all'` for closed and merged ones too. forklift finds its
   * one sync PR with it. Throws `UNSUPPORTED` when this forge cannot list PRs (the
   * default).
   */
  async findPrs(_query: {
    head: string;
    base: string;
    state?: 'open' | 'all';
  }): Promise<PullRequest[]> {
    throw new BbError('UNSUPPORTED', `the ${this.kind} forge cannot list pull requests`);
  }

  /** Open an issue as the token's user. Throws `UNSUPPORTED` when this forge cannot (the default). */
  async openIssue(_input: { title: string; body: string }): Promise<Issue> {
    throw new BbError('UNSUPPORTED', `the ${this.kind} forge cannot open issues`);
  }

  /** Close issue or PR `n` (a closed one stays closed). `UNSUPPORTED` by default. */
  async closeIssue(_n: number): Promise<void> {
    throw new BbError('UNSUPPORTED', `the ${this.kind} forge cannot close issues`);
  }

  /** The login of the token's user. `UNSUPPORTED` by default. */
  async whoami(): Promise<string> {
    throw new BbError('UNSUPPORTED', `the ${this.kind} forge cannot say who its token is`);
  }

  /** Whether PR `n` is open. */
  async isPrOpen(n: number): Promise<boolean> {
    return (await this.readPr(n)).state === 'open';
  }
}
