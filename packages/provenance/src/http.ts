import type { KeyObject } from 'node:crypto';
import { jsonText } from '@bb/wall';
import { keyRing } from './keys';
import { verifyChain, verifyRecord } from './sign';
import { type RunFilter, type RunRecordStore, recordStatus } from './store';

export interface ProvenanceHandlerOptions {
  store: RunRecordStore;
  /** This orchestrator's own key. */
  publicKey: KeyObject;
  publicPem: string;
  keyId: string;
  /**
   * Verify against every key the fleet trusts (the store's `trustedKeys`), and
   * list them all at `/api/keys`. @default this orchestrator's key alone
   */
  fleetKeys?: boolean;
}

/** JSON whose strings (summaries, details: the agent's words) hold nothing a terminal acts on (I8). */
const json = (status: number, value: unknown) =>
  new Response(`${jsonText(value, 2)}\n`, {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8' },
  });

/**
 * The provenance API as a `(Request) => Promise<Response | undefined>` handler
 * (undefined: not a provenance route). `GET /api/runs` (filters `repo`, `issue`,
 * `agent`, `status`, `slug`; `page`, `limit`), `GET /api/runs/:id`,
 * `GET /api/runs/:id/verify`, `GET /api/keys`.
 */
export function createProvenanceHandler(options: ProvenanceHandlerOptions) {
  return async (req: Request): Promise<Response | undefined> => {
    const url = new URL(req.url);
    if (!url.pathname.startsWith('/api/runs') && url.pathname !== '/api/keys') return undefined;
    if (req.method !== 'GET')
      return json(405, { error: `${req.method} is not allowed here; use GET` });
    const trusted = async () =>
      options.fleetKeys
        ? (await options.store.trustedKeys()).filter((k) => k.keyId !== options.keyId)
        : [];
    if (url.pathname === '/api/keys') {
      return json(200, {
        keys: [
          { keyId: options.keyId, algorithm: 'ed25519', publicKey: options.publicPem, own: true },
          ...(await trusted()).map((k) => ({
            keyId: k.keyId,
            algorithm: 'ed25519',
            publicKey: k.publicKey,
            by: k.by,
            addedAt: k.addedAt,
          })),
        ],
      });
    }
    if (url.pathname === '/api/runs' || url.pathname === '/api/runs/') {
      const q = url.searchParams;
      const page = Number(q.get('page') ?? 1);
      const limit = Number(q.get('limit') ?? 20);
      const issue = q.get('issue');
      if (!Number.isInteger(page) || page < 1)
        return json(400, { error: `page must be a whole number from 1, got ${q.get('page')}` });
      if (!Number.isInteger(limit) || limit < 1 || limit > 100)
        return json(400, { error: `limit must be 1 to 100, got ${q.get('limit')}` });
      if (issue !== null && !/^[1-9]\d*$/.test(issue))
        return json(400, { error: `issue must be a positive number, got ${issue}` });
      const filter: RunFilter = {
        ...(q.get('repo') ? { repo: q.get('repo')! } : {}),
        ...(issue ? { issue: Number(issue) } : {}),
        ...(q.get('agent') ? { agent: q.get('agent')! } : {}),
        ...(q.get('status') ? { status: q.get('status')! } : {}),
        ...(q.get('slug') ? { slug: q.get('slug')! } : {}),
      };
      const { total, records } = await options.store.list(filter, page, limit);
      return json(200, {
        total,
        page,
        limit,
        runs: records.map((s) => ({
          id: s.record.id,
          slug: s.record.slug,
          agent: s.record.agent,
          forge: s.record.forge,
          turn: s.record.turn,
          status: recordStatus(s),
          startedAt: s.record.startedAt,
          durationMs: s.record.durationMs,
          hash: s.hash,
        })),
      });
    }
    const m = /^\/api\/runs\/([^/]+)(\/verify)?$/.exec(url.pathname);
    if (!m) return json(404, { error: 'not found' });
    const signed = await options.store.get(decodeURIComponent(m[1]!));
    if (!signed) return json(404, { error: `no run ${m[1]}` });
    if (!m[2]) return json(200, signed);
    const ring = new Map([
      ...keyRing(await trusted()),
      [options.keyId, options.publicKey] as const,
    ]);
    const record = verifyRecord(signed, ring);
    const chain = verifyChain(await options.store.chain(signed.record.slug), ring);
    return json(200, {
      id: signed.record.id,
      record,
      chain,
      opLog: { verified: signed.record.opLog.verified, problems: signed.record.opLog.problems },
    });
  };
}
