// The PostgreSQL floors' write (webhook-postgres, fleet-throughput): apart from load.ts,
// so the SQLite benches never load pg.
import { PG_STATE_SQL } from '@bb/state-postgres';

/**
 * The write this design's endpoint makes, made with the store's own statement and
 * nothing around it: the floors' write. A PR comment routed by its PR (`byPr`), or an
 * issue comment on `issue`.
 */
export function acceptStatement(
  body: { comment: { id: number }; issue: { number: number } },
  on: { issue: string } | 'byPr',
): { name: string; text: string; values: unknown[] } {
  const now = new Date().toISOString();
  const byPr = on === 'byPr';
  return {
    name: 'floor_accept',
    text: PG_STATE_SQL.accept,
    values: [
      `comment:${body.comment.id}`,
      null,
      'comment_created',
      now,
      byPr ? null : on.issue,
      byPr ? 'parked' : 'pending',
      now,
      JSON.stringify(body.comment),
      byPr ? 'acme' : null,
      byPr ? 'widgets' : null,
      byPr ? body.issue.number : null,
      byPr ? 'parkIfRunning' : null,
      false,
    ],
  };
}
