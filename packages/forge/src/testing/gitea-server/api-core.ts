/**
 * What the test server's route modules share: its world and the helpers they
 * answer with, so each group of endpoints lives in a file of its own.
 */
import type { GitStore } from './git';
import type {
  CommentModel,
  HookModel,
  IssueModel,
  LabelModel,
  OrgModel,
  RepoModel,
  ReviewModel,
  UserModel,
} from './model';
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
  /** The repository's label of that name, made when it has none. */
  label(repo: RepoModel, name: string, color?: string, description?: string): LabelModel;
  /** A request's `labels` (names or ids) as names; 422 when not a list, 404 for an unknown id. */
  labelNames(repo: RepoModel, value: unknown): string[];
  newIssue(repo: RepoModel, author: string, input: NewIssue, notify: boolean): IssueModel;
  comment(repo: RepoModel, issue: IssueModel, author: string, body: string): CommentModel;
  setLabels(repo: RepoModel, issue: IssueModel, as: string, labels: string[]): void;
  assign(repo: RepoModel, issue: IssueModel, as: string, assignees: string[]): void;
  /** An issue's or PR's edit: title, body, assignees, state. */
  editIssue(
    repo: RepoModel,
    issue: IssueModel,
    as: string,
    b: Record<string, unknown>,
  ): Promise<void>;
  openPr(repo: RepoModel, as: string, b: Record<string, unknown>): Promise<IssueModel>;
  merge(
    repo: RepoModel,
    issue: IssueModel,
    as: string,
    style?: 'merge' | 'squash',
  ): Promise<string>;
}

export interface NewIssue {
  title: string;
  body?: string;
  labels?: string[];
  assignees?: string[];
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
  /**
   * The methods it answers; any other gets 405, or with `otherMethods: 'next'`
   * is offered to the routes after it. `*`: all (the route says 405 itself,
   * after what it checks first).
   */
  methods: string[];
  otherMethods?: 'next';
  /** A further test of the path's parameters: a route that fails it is passed over. */
  where?: (params: Record<string, string>) => boolean;
  handle(core: ApiCore, req: RouteRequest): RouteAnswer | Promise<RouteAnswer>;
}
