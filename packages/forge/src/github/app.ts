/**
 * A GitHub App as the orchestrator's identity (@octokit/auth-app): installation tokens
 * for its own calls, and for each bottle's gate a token narrowed to one repository and
 * to what the forge sidecar needs.
 */
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { BbError, errorMessage, registerSecret } from '@bb/errors';
import { createAppAuth } from '@octokit/auth-app';
import { request as octokitRequest } from '@octokit/request';
import type { RepoName } from '../kind';
import { boundedFetch, gitHubError } from './client';

/** The variables naming a GitHub App: its id, its private key's file and (optionally) one installation. */
export const GITHUB_APP_ID_VAR = 'FORGE_GITHUB_APP_ID';
export const GITHUB_APP_KEY_VAR = 'FORGE_GITHUB_APP_KEY_FILE';
export const GITHUB_APP_INSTALLATION_VAR = 'FORGE_GITHUB_APP_INSTALLATION';

/**
 * What a bottle's gate may do with its token, and no more: the sidecar comments on its
 * issue, opens and updates its PR, and pushes its branch. Metadata is every token's.
 */
export const BOTTLE_PERMISSIONS = {
  contents: 'write',
  issues: 'write',
  pull_requests: 'write',
  metadata: 'read',
} as const;

/**
 * What the orchestrator's own installation tokens need, checked by `bb doctor`:
 * the bottle's, plus the org's members (who may drive an agent).
 */
export const APP_PERMISSIONS: Record<string, 'read' | 'write'> = {
  ...BOTTLE_PERMISSIONS,
  members: 'read',
};

/** A token and when GitHub stops taking it. */
export interface ExpiringToken {
  token: string;
  expiresAt: Date;
}

export interface GitHubAppOptions {
  appId: number;
  /** The App's private key, PEM (PKCS#1 as GitHub hands it out, or PKCS#8). */
  privateKey: string;
  /** The REST API's base. */
  apiUrl: string;
  /** One installation for every repository; otherwise each repository's is asked for. */
  installationId?: number | undefined;
  /** A token expiring sooner than this is made again before use. @default 5 min */
  renewBeforeMs?: number;
}

/** Installation tokens made as GitHub asks; their values are registered as secrets. */
export class GitHubApp {
  readonly appId: number;
  readonly #auth: ReturnType<typeof createAppAuth>;
  readonly #fixed: number | undefined;
  /** What is asked of GitHub once and kept (an installation, the slug); forgotten when it fails. */
  readonly #kept = new Map<string, Promise<unknown>>();
  readonly #renewBeforeMs: number;
  #jwt: { token: string; until: number } | undefined;
  /** Bottle tokens are made one at a time: auth-app shares one request among concurrent ones. */
  #minting: Promise<unknown> = Promise.resolve();

  constructor(readonly options: GitHubAppOptions) {
    this.appId = options.appId;
    this.#fixed = options.installationId;
    this.#renewBeforeMs = options.renewBeforeMs ?? 5 * 60_000;
    this.#auth = createAppAuth({
      appId: options.appId,
      privateKey: pkcs8(options.privateKey),
      request: octokitRequest.defaults({
        baseUrl: options.apiUrl.replace(/\/+$/, ''),
        headers: { 'user-agent': 'bot-bottle' },
        request: { fetch: boundedFetch() },
      }),
    });
  }

  /**
   * A JWT of the App, for the `/app` endpoints: made for ten minutes and used for eight.
   * Tokens and JWTs are never registered one by one (there is a new one every hour, for
   * every bottle): `redactString` knows their shapes.
   */
  async jwt(): Promise<string> {
    if (this.#jwt && this.#jwt.until > Date.now()) return this.#jwt.token;
    try {
      const { token } = await this.#auth({ type: 'app' });
      this.#jwt = { token, until: Date.now() + 8 * 60_000 };
      return token;
    } catch (err) {
      throw appError(err, `the JWT of GitHub App ${this.appId}`);
    }
  }

  #keep<T>(key: string, ask: () => Promise<T>): Promise<T> {
    let kept = this.#kept.get(key) as Promise<T> | undefined;
    if (!kept) {
      kept = ask();
      kept.catch(() => this.#kept.delete(key));
      this.#kept.set(key, kept);
    }
    return kept;
  }

  /** The App's slug; its comments are by `<slug>[bot]`. */
  slug(): Promise<string> {
    return this.#keep(
      'slug',
      async () => ((await this.#app('GET', '/app')) as { slug: string }).slug,
    );
  }

  /** The login GitHub shows for what the App does. */
  async login(): Promise<string> {
    return `${await this.slug()}[bot]`;
  }

  /** The installation that covers `target` (its owner's): asked once, then kept. */
  installationFor(target: RepoName | { owner: string }): Promise<number> {
    if (this.#fixed !== undefined) return this.#fixedFor(target.owner);
    const key = 'repo' in target ? `${target.owner}/${target.repo}` : target.owner;
    return this.#keep(`installation ${key}`, () => this.#findInstallation(target));
  }

  /** Every installation of the App. */
  async installations(): Promise<Array<{ id: number; account: string }>> {
    if (this.#fixed !== undefined)
      return [{ id: this.#fixed, account: (await this.installation(this.#fixed)).account }];
    const out: Array<{ id: number; account: string }> = [];
    for (let page = 1; ; page++) {
      const data = (await this.#app(
        'GET',
        `/app/installations?per_page=100&page=${page}`,
      )) as Array<{
        id: number;
        account: { login: string } | null;
      }>;
      for (const i of data) out.push({ id: i.id, account: i.account?.login ?? '' });
      if (data.length < 100) return out;
    }
  }

  /**
   * The orchestrator's token for `target`: its installation's, with the App's
   * permissions on the repositories it was installed on. Kept by @octokit/auth-app and
   * made again when it is about to expire.
   */
  async token(target: RepoName | { owner: string }): Promise<string> {
    return this.installationToken(await this.installationFor(target));
  }

  /** A token of `installationId` itself (its repositories), for sweeping them. */
  async installationToken(installationId: number): Promise<string> {
    try {
      let a = await this.#auth({ type: 'installation', installationId });
      // @octokit/auth-app keeps a token 59 minutes; one GitHub gave for less is made again.
      if (Date.parse(a.expiresAt) - Date.now() < this.#renewBeforeMs)
        a = await this.#auth({ type: 'installation', installationId, refresh: true });
      return a.token;
    } catch (err) {
      throw appError(err, `a token of installation ${installationId}`);
    }
  }

  /**
   * A new token for one bottle's gate: `target` alone, with BOTTLE_PERMISSIONS alone.
   * Never cached: each bottle gets its own, so revoking or expiring one touches no other.
   */
  bottleToken(target: RepoName): Promise<ExpiringToken> {
    const made = this.#minting.then(() => this.#bottleToken(target));
    this.#minting = made.catch(() => {});
    return made;
  }

  async #bottleToken(target: RepoName): Promise<ExpiringToken> {
    const installationId = await this.installationFor(target);
    const what = `a token for ${target.owner}/${target.repo}`;
    let a: {
      token: string;
      expiresAt: string;
      permissions: unknown;
      repositorySelection: string;
      repositoryNames?: string[] | undefined;
    };
    try {
      a = await this.#auth({
        type: 'installation',
        installationId,
        repositoryNames: [target.repo],
        permissions: { ...BOTTLE_PERMISSIONS },
        refresh: true,
      });
    } catch (err) {
      throw appError(err, what);
    }
    // What GitHub gave, checked against what was asked: a wider token is never handed on.
    const perms = a.permissions as Record<string, string>;
    const wider = Object.entries(perms).filter(
      ([p, l]) => l !== (BOTTLE_PERMISSIONS as Record<string, string>)[p],
    );
    if (
      a.repositorySelection !== 'selected' ||
      JSON.stringify(a.repositoryNames) !== JSON.stringify([target.repo]) ||
      wider.length > 0
    )
      throw new BbError(
        'FORBIDDEN',
        `GitHub gave ${what} wider than asked (${a.repositorySelection} repositories ${JSON.stringify(a.repositoryNames ?? [])}, ${Object.entries(
          perms,
        )
          .map(([p, l]) => `${p}: ${l}`)
          .join(', ')}): it is not used`,
      );
    return { token: a.token, expiresAt: new Date(a.expiresAt) };
  }

  /** The fixed installation, for an owner it is that of (asked once). */
  async #fixedFor(owner: string): Promise<number> {
    const id = this.#fixed!;
    const account = await this.#keep(
      'fixed account',
      async () => (await this.installation(id)).account,
    );
    if (account.toLowerCase() !== owner.toLowerCase())
      throw new BbError(
        'FORBIDDEN',
        `${GITHUB_APP_INSTALLATION_VAR} ${id} is the installation on ${account}, not on ${owner}: unset it to find each repository's`,
      );
    return id;
  }

  /** The App's webhook configuration, as GitHub holds it (`GET /app/hook/config`). */
  async hookConfig(): Promise<{ url?: string; content_type?: string; insecure_ssl?: string }> {
    return (await this.#app('GET', '/app/hook/config')) as { url?: string };
  }

  /** Point the App's one webhook (every installation's) at `url`, signed with `secret`. */
  async setHook(url: string, secret: string): Promise<void> {
    await this.#app('PATCH', '/app/hook/config', {
      url,
      content_type: 'json',
      secret,
      insecure_ssl: '0',
    });
  }

  /** The permissions and events of one installation, as GitHub holds them. */
  async installation(
    id: number,
  ): Promise<{ permissions: Record<string, string>; events: string[]; account: string }> {
    const i = (await this.#app('GET', `/app/installations/${id}`)) as {
      permissions?: Record<string, string>;
      events?: string[];
      account?: { login: string } | null;
    };
    return {
      permissions: i.permissions ?? {},
      events: i.events ?? [],
      account: i.account?.login ?? '',
    };
  }

  async #findInstallation(target: RepoName | { owner: string }): Promise<number> {
    const path =
      'repo' in target
        ? `/repos/${enc(target.owner)}/${enc(target.repo)}/installation`
        : `/orgs/${enc(target.owner)}/installation`;
    try {
      return ((await this.#app('GET', path)) as { id: number }).id;
    } catch (err) {
      const e = err as BbError;
      if (e.code === 'NOT_FOUND')
        throw new BbError(
          'FORBIDDEN',
          `GitHub App ${this.appId} is not installed on ${'repo' in target ? `${target.owner}/${target.repo}` : target.owner}: install it there (docs/github-setup.md)`,
          { cause: err },
        );
      throw err;
    }
  }

  /** A request of the App itself, with its JWT (`/app`, its installations, its hook). */
  async #app(
    method: 'GET' | 'PATCH',
    path: string,
    data?: Record<string, string>,
  ): Promise<unknown> {
    const jwt = await this.jwt();
    try {
      const res = await octokitRequest(`${method} ${path}`, {
        baseUrl: this.options.apiUrl.replace(/\/+$/, ''),
        headers: { authorization: `bearer ${jwt}`, 'user-agent': 'bot-bottle' },
        request: { fetch: boundedFetch() },
        // `url` is Octokit's own parameter (the request's): a body is given whole.
        ...(data ? { data } : {}),
      });
      return res.data;
    } catch (err) {
      throw gitHubError(err, `${path} as GitHub App ${this.appId}`);
    }
  }
}

const enc = (s: string) => encodeURIComponent(s);

/** auth-app's errors (a RequestError, or its own Error) as BbErrors. */
function appError(err: unknown, what: string): BbError {
  const e = err as { status?: number; response?: unknown };
  if (e.response !== undefined || typeof e.status === 'number') return gitHubError(err, what);
  return new BbError('FORGE_ERROR', `GitHub App: cannot make ${what}: ${errorMessage(err)}`, {
    cause: err,
  });
}

/** The key as PKCS#8 (what auth-app signs with), or a clear error. */
function pkcs8(pem: string): string {
  try {
    return createPrivateKey(pem).export({ type: 'pkcs8', format: 'pem' }).toString();
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `the GitHub App's private key is not a PEM private key (${errorMessage(err)}): use the .pem file GitHub gave when the key was generated`,
    );
  }
}

/**
 * The App an environment names (FORGE_GITHUB_APP_ID and FORGE_GITHUB_APP_KEY_FILE), or
 * undefined when it names none. Half of one is an error, as is a key that cannot be read.
 */
export function gitHubAppFromEnv(
  env: Record<string, string | undefined>,
  apiUrl: string,
): GitHubApp | undefined {
  const id = env[GITHUB_APP_ID_VAR];
  const keyFile = env[GITHUB_APP_KEY_VAR];
  if (!id && !keyFile) return undefined;
  if (!id || !keyFile)
    throw new BbError(
      'INVALID_INPUT',
      `set both ${GITHUB_APP_ID_VAR} (the App's id) and ${GITHUB_APP_KEY_VAR} (its private key's .pem file), or neither (then FORGE_TOKEN is used)`,
    );
  if (!/^[1-9]\d*$/.test(id))
    throw new BbError(
      'INVALID_INPUT',
      `${GITHUB_APP_ID_VAR} ${JSON.stringify(id)} is not an App id: the number on the App's settings page ("App ID")`,
    );
  const inst = env[GITHUB_APP_INSTALLATION_VAR];
  if (inst !== undefined && inst !== '' && !/^[1-9]\d*$/.test(inst))
    throw new BbError(
      'INVALID_INPUT',
      `${GITHUB_APP_INSTALLATION_VAR} ${JSON.stringify(inst)} is not an installation id (a number), or leave it unset`,
    );
  let key: string;
  try {
    key = readFileSync(keyFile, 'utf8');
  } catch (err) {
    throw new BbError(
      'INVALID_INPUT',
      `${GITHUB_APP_KEY_VAR} ${keyFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? errorMessage(err)})`,
    );
  }
  registerSecret(key.trim());
  return new GitHubApp({
    appId: Number(id),
    privateKey: key,
    apiUrl,
    ...(inst ? { installationId: Number(inst) } : {}),
  });
}
