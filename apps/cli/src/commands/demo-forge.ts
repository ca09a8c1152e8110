/** `bb demo`'s forge: a Gitea- or GitHub-compatible test server, seen the same way. */
import {
  createGiteaTestServer,
  createGitHubTestServer,
  type GiteaWorldSeed,
  type IssueModel,
} from '@bb/forge/test-server';

/** The demo's forge: a Gitea- or GitHub-compatible test server, seen the same way. */
export interface DemoForge {
  title: string;
  apiUrl: string;
  /** What the orchestrator is told of it (the kind and its variables). */
  env: Record<string, string>;
  cloneUrl(repo: string): string;
  issue(repo: string, n: number): IssueModel;
  createIssue(
    as: string,
    repo: string,
    input: { title: string; body?: string; labels?: string[]; assignees?: string[] },
  ): number;
  comment(as: string, repo: string, n: number, body: string): number;
  mergePr(as: string, repo: string, n: number): Promise<unknown>;
  addHook(url: string, secret: string): void;
  close(): Promise<void>;
}

export async function demoForge(
  kind: 'gitea' | 'github',
  world: GiteaWorldSeed,
): Promise<DemoForge> {
  if (kind === 'gitea') {
    const g = await createGiteaTestServer({ world });
    return {
      title: 'Gitea',
      apiUrl: g.apiUrl,
      env: { FORGE_GITEA_API: g.apiUrl },
      cloneUrl: (r) => g.cloneUrl(r),
      issue: (r, n) => g.issue(r, n),
      createIssue: (as, r, i) => g.createIssue(as, r, i),
      comment: (as, r, n, b) => g.comment(as, r, n, b),
      mergePr: (as, r, n) => g.mergePr(as, r, n),
      addHook: (url, secret) => void g.addHook({ url, secret }),
      close: () => g.close(),
    };
  }
  const h = await createGitHubTestServer({ world });
  return {
    title: 'GitHub',
    apiUrl: h.apiUrl,
    env: { FORGE_KIND: 'github', FORGE_GITHUB_API: h.apiUrl, FORGE_GITHUB_URL: h.url },
    cloneUrl: (r) => h.cloneUrl(r),
    issue: (r, n) => h.issue(r, n),
    createIssue: (as, r, i) => h.openIssue(as, r, i),
    comment: (as, r, n, b) => h.comment(as, r, n, b),
    mergePr: (as, r, n) => h.mergePr(as, r, n),
    addHook: (url, secret) => void h.hooks.add(url, secret),
    close: () => h.close(),
  };
}
