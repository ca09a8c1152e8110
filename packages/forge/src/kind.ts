import { BbError } from '@bb/errors';
import type { ParsedWebhook, WebhookHeaders } from './events';
import type { Forge } from './forge';

/**
 * How a kind of forge delivers webhooks: where they arrive, how a delivery is
 * verified and what it means. Needs no repository and no token.
 */
export interface WebhookScheme {
  /** The path deliveries are posted to, e.g. `/webhooks/gitea`. */
  readonly path: string;
  /** The delivery's id as the forge sent it (for logs), if any. */
  deliveryId(headers: WebhookHeaders): string | undefined;
  /**
   * Whether the delivery is signed by any of `secrets` (several while a secret
   * is being changed), in constant time. Never throws for a bad signature, and
   * an empty secret never verifies.
   */
  verify(
    headers: WebhookHeaders,
    rawBody: Uint8Array | string,
    secrets: readonly string[],
  ): boolean;
  /** A verified delivery as a `ForgeEvent`, or `{ kind: 'ignored' }`; `INVALID_INPUT` for a malformed one. */
  parse(headers: WebhookHeaders, rawBody: Uint8Array | string): ParsedWebhook;
}

/** A repository, by owner and name. */
export interface RepoName {
  owner: string;
  repo: string;
}

/** Where a person reads something on the forge. */
export type WebTarget = RepoName & ({ issue: number } | { pr: number } | Record<never, never>);

/** A check `bb doctor` shows: `ok` null means it could not be run. */
export interface SiteCheck {
  check: string;
  ok: boolean | null;
  detail: string;
  fix?: string;
}

/** A webhook to create or bring up to date on a repository or an org. */
export interface HookRequest {
  /** `owner/repo`, or `owner` alone for an org-wide hook. */
  target: string;
  url: string;
  secret: string;
}

/**
 * One installation of a forge (one Gitea server, say), as configured from the
 * environment. It never holds a token: each call that needs one is given it.
 */
/**
 * A site whose identity makes its own tokens (a GitHub App): the orchestrator then holds
 * no token of its own (the site's methods are called without one), and each bottle's
 * gate is given a token made for it alone.
 */
export interface SiteCredentials {
  /** Who acts, in words, for people and logs (no secret), e.g. `GitHub App 12`. */
  readonly describe: string;
  /**
   * A new token for one bottle's gate: `target` alone, and only what the forge sidecar
   * needs (contents, issues and pull requests), with when it expires.
   */
  bottleToken(target: RepoName): Promise<{ token: string; expiresAt: Date }>;
}

export interface ForgeSite {
  /** The kind's name. */
  readonly kind: string;
  /** Where the forge is, for people and logs (never holds a secret). */
  readonly location: string;
  /**
   * The environment (no secret in it) from which `kind.fromEnv` makes this
   * site again: what a bottle's forge sidecar is given.
   */
  env(): Record<string, string>;
  /** Set when the site acts as its own identity (see SiteCredentials); no token is needed then. */
  readonly credentials?: SiteCredentials | undefined;
  /** A forge bound to one repository, acting as the token's user (the site's identity without one). */
  forgeFor(target: RepoName & { token?: string | undefined }): Forge;
  /** The login of the token's user (the site's identity's without one). */
  whoami(token?: string): Promise<string>;
  /**
   * The repositories to sweep: those `named` (an `owner/*` entry meaning all of
   * that owner's), or every one the token's user can reach when none is named.
   */
  repositories(token: string | undefined, named: readonly RepoName[]): Promise<RepoName[]>;
  /** Where the repository is cloned from. */
  cloneUrl(target: RepoName): string;
  /** The page of a repository, an issue or a PR. */
  webUrl(target: WebTarget): string;
  /** Create or update the webhook that feeds the orchestrator; what was done, in words. */
  installHook?(token: string | undefined, hook: HookRequest): Promise<string>;
  /**
   * What `bb doctor` checks of this forge and the token beyond "it answers"
   * and org membership (`repos`: those the orchestrator is told to cover).
   */
  checks?(token: string | undefined, repos: readonly RepoName[]): Promise<SiteCheck[]>;
  /** Let go of connections (at shutdown). */
  close?(): Promise<void>;
}

/**
 * A kind of forge: everything bot-bottle needs to know about it in one plug.
 * Register one with `registerForgeKind`; `FORGE_KIND` picks it.
 */
export interface ForgeKind {
  /** A short lower-case name, e.g. `gitea`: `FORGE_KIND`, the webhook path, event keys. */
  readonly name: string;
  /** One line for `--help` and errors: what the kind is and the variables it reads. */
  readonly summary: string;
  /**
   * The site the environment describes. Throws one `INVALID_INPUT` naming every
   * bad or missing variable and what to set it to.
   */
  fromEnv(env: Record<string, string | undefined>): ForgeSite;
  /**
   * The site whose web pages are at `webBase` (e.g. `https://gitea.example.com`),
   * for a tool that knows a repository only by its remote URL (forklift). A kind
   * without it is configured by its variables (`fromEnv`) there too.
   */
  siteAt?(webBase: string): ForgeSite;
  /**
   * Whether a repository whose web pages are at `webBase` is on this kind's forge
   * (`https://github.com` for GitHub), so forklift can tell the kind from a remote
   * URL. A kind whose sites are anyone's hosts (Gitea) leaves it unset.
   */
  ownsUrl?(webBase: string): boolean;
  /** How deliveries are verified and read. */
  readonly webhook: WebhookScheme;
  /** A bottle's branch for `agent` working on issue `issue`. */
  bottleBranch(agent: string, issue: number): string;
  /** The issue a bottle branch belongs to, or undefined when `branch` is not one. */
  issueOfBranch(branch: string): number | undefined;
  /**
   * An ES module file, self-contained (bundled), whose default export is this
   * kind: a bottle's forge sidecar imports it, since the sidecar runs where
   * nothing else of the orchestrator's is installed. Kinds built into
   * `@bb/forge` leave it unset.
   */
  readonly sidecarModule?: string;
}

/** The default bottle branch convention: `bb/<agent>-<issue>`. */
export const BOTTLE_BRANCH = /^bb\/[a-z0-9][a-z0-9._-]*-(\d+)$/;

/** `bottleBranch` and `issueOfBranch` of the default convention, for kinds that keep it. */
export const defaultBottleBranches: Pick<ForgeKind, 'bottleBranch' | 'issueOfBranch'> = {
  bottleBranch: (agent, issue) => `bb/${agent}-${issue}`,
  issueOfBranch: (branch) => {
    const m = BOTTLE_BRANCH.exec(branch);
    return m ? Number(m[1]) : undefined;
  },
};

const KIND_NAME = /^[a-z][a-z0-9-]{0,30}$/;

/** The prefix every variable of a kind's site has: `FORGE_<NAME>_` (`FORGE_GITEA_`). */
export function siteEnvPrefix(kindName: string): string {
  return `FORGE_${kindName.toUpperCase().replace(/-/g, '_')}_`;
}

/**
 * Check a site's variables before they reach a bottle's gate, where the forge
 * token is: each is the kind's own (`FORGE_<NAME>_…`), so none can stand for
 * one the gate sets or reads (`NODE_OPTIONS`, `PATH`, `FORGE_TOKEN_FILE`,
 * `BB_*`, ...), and none spans lines. `INVALID_INPUT` naming the first that is not.
 */
export function checkSiteEnv(kindName: string, env: Record<string, string>): void {
  const prefix = siteEnvPrefix(kindName);
  for (const [k, v] of Object.entries(env)) {
    if (!k.startsWith(prefix) || !/^[A-Z][A-Z0-9_]*$/.test(k))
      throw new BbError(
        'INVALID_INPUT',
        `the ${kindName} forge kind's site variable ${JSON.stringify(k)} is not named ${prefix}…: a site may set only its own variables`,
      );
    if (typeof v !== 'string' || /[\0\r\n]/.test(v))
      throw new BbError(
        'INVALID_INPUT',
        `the ${kindName} forge kind's ${k} is not one line of text`,
      );
  }
}

/**
 * Check a kind's bottle branch for `agent` on issue `issue`: it must lead back
 * to that issue, or two bottles could share a push scope.
 */
export function checkBottleBranch(kind: ForgeKind, agent: string, issue: number): string {
  const branch = kind.bottleBranch(agent, issue);
  if (kind.issueOfBranch(branch) !== issue || !/^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$/.test(branch))
    throw new BbError(
      'INVALID_INPUT',
      `the ${kind.name} forge kind's bottle branch for issue #${issue} (${JSON.stringify(branch)}) does not lead back to that issue`,
    );
  return branch;
}

/** A registry of forge kinds; `forgeKinds` is the process's own. */
export class ForgeKindRegistry {
  readonly #kinds = new Map<string, ForgeKind>();
  readonly #builtIn = new Set<string>();

  constructor(readonly defaultKind: string) {}

  /**
   * Add a kind. Throws `CONFLICT` when another kind has its name, unless
   * `replace` (a kind of the same name made again, e.g. by a second `serve()`
   * in one process); a built-in kind is never replaced.
   */
  register(kind: ForgeKind, options: { replace?: boolean } = {}): void {
    if (!KIND_NAME.test(kind.name))
      throw new BbError(
        'INVALID_INPUT',
        `forge kind name ${JSON.stringify(kind.name)} must be lower-case letters, digits and dashes`,
      );
    // Deliveries arrive under /webhooks/: a kind never takes the dashboard's or the APIs' paths.
    if (!/^\/webhooks\/[A-Za-z0-9._-]+$/.test(kind.webhook?.path ?? ''))
      throw new BbError(
        'INVALID_INPUT',
        `the ${kind.name} forge kind's webhook path ${JSON.stringify(kind.webhook?.path)} must be /webhooks/<name>`,
      );
    const had = this.#kinds.get(kind.name);
    if (had && had !== kind && (!options.replace || this.#builtIn.has(kind.name)))
      throw new BbError('CONFLICT', `a forge kind named ${kind.name} is registered already`);
    this.#kinds.set(kind.name, kind);
  }

  /** Mark the kinds registered so far as built in: never replaced. */
  seal(): void {
    for (const name of this.#kinds.keys()) this.#builtIn.add(name);
  }

  /** The kind called `name`; `INVALID_INPUT` naming the known ones when there is none. */
  get(name: string): ForgeKind {
    const kind = this.#kinds.get(name);
    if (!kind)
      throw new BbError(
        'INVALID_INPUT',
        `FORGE_KIND ${JSON.stringify(name)} is not a known forge kind: use one of ${this.names().join(', ')}, or register yours with registerForgeKind`,
      );
    return kind;
  }

  /** The registered kind that says it owns `webBase` (`ForgeKind.ownsUrl`), if one does. */
  forUrl(webBase: string): ForgeKind | undefined {
    return this.names()
      .map((n) => this.get(n))
      .find((k) => k.ownsUrl?.(webBase));
  }

  names(): string[] {
    return [...this.#kinds.keys()].sort();
  }

  /** The kind `FORGE_KIND` names (the default when unset) and the site the environment describes. */
  fromEnv(env: Record<string, string | undefined>): { kind: ForgeKind; site: ForgeSite } {
    const kind = this.get(env['FORGE_KIND'] || this.defaultKind);
    return { kind, site: kind.fromEnv(env) };
  }
}
