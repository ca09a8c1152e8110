/**
 * What the test server's route modules share: its world and the helpers they
 * answer with, so each group of endpoints lives in a file of its own.
 */
import type { GitStore } from './git';
import type { HookModel, IssueModel, OrgModel, RepoModel, ReviewModel, UserModel } from './model';
import type { ShapeContext } from './shapes';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
    readonly headers: Record<string, string> = {},
  ) {
    super(`HTTP ${status}`);
  }
}

export interface ApiCore {
  /** Web root with a trailing slash. */
  readonly base: string;
  readonly users: Map<string, UserModel>;
  readonly orgs: Map<string, OrgModel>;
  readonly repos: Map<string, RepoModel>;
  readonly hooks: HookModel[];
  readonly git: GitStore;
  id(): number;
  user(login: string): UserModel;
  ctx(repo: RepoModel): ShapeContext;
  canWrite(repo: RepoModel, login: string): boolean;
  isRepoAdmin(repo: RepoModel, login: string): boolean;
  issueOr404(repo: RepoModel, n: number): IssueModel;
  notFound(message?: string): unknown;
  apiError(message: string): unknown;
  touch(repo: RepoModel, issue: IssueModel): void;
  emit(repo: RepoModel, eventType: string, payload: unknown): void;
  issuePayload(
    repo: RepoModel,
    issue: IssueModel,
    action: string,
    sender: string,
    extra?: Record<string, unknown>,
  ): Record<string, unknown>;
  page<T>(
    url: URL,
    items: T[],
    shape: (t: T) => unknown,
  ): { body: unknown; headers: Record<string, string> };
  review(repo: RepoModel, pr: IssueModel, as: string, input: NewReview): ReviewModel;
}

/** A review as a person submits it. */
export interface NewReview {
  state: 'approved' | 'changes_requested' | 'commented';
  body?: string;
  /** Inline comments: a file, a line of the new file, a text. */
  comments?: Array<{ path: string; line: number; body: string }>;
}

/** One request, as a route sees it. */
export interface RouteRequest {
  method: string;
  /** The path's parameters, decoded. */
  params: Record<string, string>;
  url: URL;
  /** The caller; `needUser` throws 401 without one. */
  user: string | null;
  needUser(): string;
  readJson(): Promise<Record<string, unknown>>;
  repo(): RepoModel;
}

export interface RouteAnswer {
  status?: number;
  body: unknown;
  headers?: Record<string, string>;
}

export interface Route {
  /** Gitea's swagger path template, e.g. `/repos/{owner}/{repo}/branches`. */
  pattern: string;
  methods: string[];
  handle(core: ApiCore, req: RouteRequest): RouteAnswer | Promise<RouteAnswer>;
}
