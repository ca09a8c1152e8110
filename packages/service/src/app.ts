import { errorMessage, isBbError } from '@bb/errors';
import type { ForgeSite } from '@bb/forge';
import { type RunRecordStore, sinceOf, spendSince, summarizeSpend } from '@bb/provenance';
import type { ForgeStateStore } from '@bb/state';
import { jsonText } from '@bb/wall';
import { type AccessPolicy, authenticate } from './access';
import {
  type CapacityView,
  type NoticeView,
  type ProposalView,
  renderDashboard,
} from './dashboard';

/** Route a request to the first handler that takes it. */
export function createApp(parts: {
  /** The forge's deliveries: `path` is where they arrive (the forge kind's webhook path). */
  webhook: { path: string; handle: (req: Request) => Promise<Response> };
  provenance?: (req: Request) => Promise<Response | undefined>;
  store: ForgeStateStore;
  /** Run records for the dashboard's "recent runs". */
  runs?: RunRecordStore;
  /** What waits for room to run, for the dashboard and `/api/capacity`. */
  capacity?: CapacityView;
  /** Pending supervise requests (dashboard, `/api/supervise`, `awaitingOperator` in `/api/bottles`). */
  proposals?: () => ProposalView[] | Promise<ProposalView[]>;
  /** Why targeted issues could not launch, newest last (dashboard and `/api/notices`). */
  notices?: () => NoticeView[];
  /** Where people read issues and PRs on the forge. */
  site: Pick<ForgeSite, 'webUrl'>;
  version: string;
  /** Who may use the dashboard and the APIs. @default open (loopback, no token) */
  access?: AccessPolicy;
  /** `/api/supervise/…`: requests shown and decided remotely (`createSuperviseApi` of `@bb/supervise`). */
  supervise?: (req: Request, caller: { operator: string | null }) => Promise<Response | undefined>;
}): (req: Request) => Promise<Response> {
  const json = (status: number, v: unknown) =>
    new Response(`${jsonText(v, 2)}\n`, {
      status,
      headers: { 'content-type': 'application/json' },
    });
  return async (req) => {
    const { pathname } = new URL(req.url);
    if (pathname === parts.webhook.path) return parts.webhook.handle(req);
    if (pathname === '/healthz') return json(200, { ok: true, version: parts.version });
    const access = await authenticate(req, parts.access ?? { loopback: true });
    if (!access.ok) return access.response;
    if (pathname === '/' && (req.method === 'GET' || req.method === 'HEAD'))
      return new Response(
        renderDashboard({
          // Live bottles, then the most recently destroyed ones.
          bottles: [...(await parts.store.all()), ...(await parts.store.history({ limit: 20 }))],
          runs: (await parts.runs?.list({}, 1, 20))?.records,
          ...(parts.runs
            ? { spend: summarizeSpend(await spendSince(parts.runs, sinceOf('7d')), sinceOf('7d')) }
            : {}),
          capacity: parts.capacity,
          notices: parts.notices?.() ?? [],
          proposals: (await parts.proposals?.()) ?? [],
          site: parts.site,
          version: parts.version,
        }),
        { headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' } },
      );
    if (pathname === '/api/supervise' && req.method === 'GET')
      return json(200, { pending: (await parts.proposals?.()) ?? [] });
    const decided = await parts.supervise?.(req, { operator: access.operator });
    if (decided) return decided;
    if (pathname === '/api/bottles' && req.method === 'GET') {
      const awaiting = new Set(((await parts.proposals?.()) ?? []).map((p) => p.slug));
      return json(200, {
        bottles: (await parts.store.all()).map((s) => ({
          ...s,
          awaitingOperator: s.status === 'running' && awaiting.has(s.slug),
          issueUrl: parts.site.webUrl({ owner: s.owner, repo: s.repo, issue: s.issueNumber }),
          prUrl: s.prNumber
            ? parts.site.webUrl({ owner: s.owner, repo: s.repo, pr: s.prNumber })
            : null,
        })),
      });
    }
    if (pathname === '/api/bottles/history' && req.method === 'GET') {
      // Destroyed bottles, newest first, a page at a time (`?before=<updatedAt>&limit=`).
      const q = new URL(req.url).searchParams;
      try {
        const limit = q.has('limit') ? Number(q.get('limit')) : 100;
        const rows = await parts.store.history({
          limit,
          ...(q.has('before') ? { before: q.get('before')! } : {}),
        });
        return json(200, {
          bottles: rows,
          next: rows.length === limit ? (rows.at(-1)?.updatedAt ?? null) : null,
        });
      } catch (err) {
        if (isBbError(err, 'INVALID_INPUT')) return json(400, { error: errorMessage(err) });
        throw err;
      }
    }
    if (pathname === '/api/usage' && req.method === 'GET') {
      // What the agents spent since `?since=` (7d, 24h, a date; default 7d), from the run records.
      let since: string;
      try {
        since = sinceOf(new URL(req.url).searchParams.get('since') ?? '7d');
      } catch (err) {
        return json(400, { error: errorMessage(err) });
      }
      const lines = parts.runs ? await spendSince(parts.runs, since) : [];
      return json(200, summarizeSpend(lines, since));
    }
    if (pathname === '/api/notices' && req.method === 'GET')
      return json(200, { notices: [...(parts.notices?.() ?? [])].reverse() });
    if (pathname === '/api/capacity' && req.method === 'GET') {
      const c = parts.capacity;
      return json(200, {
        usedBytes: c?.used ?? 0,
        memoryBudgetBytes: Number.isFinite(c?.memoryBudget) ? c?.memoryBudget : null,
        maxStarting: c?.maxStarting ?? null,
        waiting: c?.waiting() ?? [],
        warmBytes: c?.warmBytes ?? 0,
        warm: c?.warm?.() ?? [],
        pooled: (c?.pooled?.() ?? []).filter((p) => !p.slug.startsWith('\0')),
      });
    }
    const p = await parts.provenance?.(req);
    if (p) return p;
    return json(404, { error: `no route ${req.method} ${pathname}` });
  };
}
