import { BbError } from '@bb/errors';
import type { DeliveryRecord } from './delivery-ledger';
import { type ForgeState, ForgeStateSchema } from './forge-state';
import type { InboxEvent, InboxState } from './inbox';

/**
 * A forge state row as the SQL engines store it (snake_case columns, bottle
 * names as JSON text, times as ISO 8601 text), for engine authors: the SQLite
 * and PostgreSQL stores share this layout, so `bb state migrate` copies rows
 * byte for byte.
 */
export interface Row {
  owner: string;
  repo: string;
  issue_number: number;
  slug: string;
  agent_name: string;
  bottle_names: string;
  backend_name: string;
  agent_git_user: string;
  pr_number: number | null;
  status: string;
  last_checkin_at: string;
  session_id: string | null;
  cwd: string | null;
  created_at: string;
  updated_at: string;
}

/** The columns, in the order every query selects them. */
export const COLUMNS =
  'owner, repo, issue_number, slug, agent_name, bottle_names, backend_name, agent_git_user, pr_number, status, last_checkin_at, session_id, cwd, created_at, updated_at';

const STATUSES = new Set(['running', 'frozen', 'destroyed']);
// Timestamps were checked by zod when written; on read, a shape check suffices.
const isIso = (t: unknown): boolean =>
  typeof t === 'string' && t.length >= 20 && t.charCodeAt(4) === 45 && t.charCodeAt(10) === 84;

export function rowFields(row: Row): Omit<ForgeState, 'bottleNames'> {
  return {
    owner: row.owner,
    repo: row.repo,
    issueNumber: row.issue_number,
    slug: row.slug,
    agentName: row.agent_name,
    backendName: row.backend_name,
    agentGitUser: row.agent_git_user,
    prNumber: row.pr_number,
    status: row.status as ForgeState['status'],
    lastCheckinAt: row.last_checkin_at,
    sessionId: row.session_id,
    cwd: row.cwd,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function fastRow(row: Row): ForgeState | undefined {
  let names: unknown;
  try {
    names = JSON.parse(row.bottle_names);
  } catch {
    return undefined;
  }
  if (!Array.isArray(names) || !names.every((n) => typeof n === 'string' && n.length > 0))
    return undefined;
  const ok =
    typeof row.owner === 'string' &&
    typeof row.repo === 'string' &&
    Number.isSafeInteger(row.issue_number) &&
    row.issue_number > 0 &&
    typeof row.slug === 'string' &&
    typeof row.agent_name === 'string' &&
    typeof row.backend_name === 'string' &&
    typeof row.agent_git_user === 'string' &&
    (row.pr_number === null || (Number.isSafeInteger(row.pr_number) && row.pr_number > 0)) &&
    STATUSES.has(row.status) &&
    isIso(row.last_checkin_at) &&
    isIso(row.created_at) &&
    isIso(row.updated_at) &&
    (row.session_id === null || typeof row.session_id === 'string') &&
    (row.cwd === null || typeof row.cwd === 'string');
  if (!ok) return undefined;
  const state = rowFields(row) as ForgeState;
  state.bottleNames = names as string[];
  return state;
}

/** Name the cells of a raw row, in COLUMNS order. */
export function cellsToRow(c: unknown[]): Row {
  return {
    owner: c[0] as string,
    repo: c[1] as string,
    issue_number: c[2] as number,
    slug: c[3] as string,
    agent_name: c[4] as string,
    bottle_names: c[5] as string,
    backend_name: c[6] as string,
    agent_git_user: c[7] as string,
    pr_number: c[8] as number | null,
    status: c[9] as string,
    last_checkin_at: c[10] as string,
    session_id: c[11] as string | null,
    cwd: c[12] as string | null,
    created_at: c[13] as string,
    updated_at: c[14] as string,
  };
}

/** The row a state is stored as (exported for the benchmark's baseline). */
export function stateToRow(s: ForgeState): Row {
  return {
    owner: s.owner,
    repo: s.repo,
    issue_number: s.issueNumber,
    slug: s.slug,
    agent_name: s.agentName,
    bottle_names: JSON.stringify(s.bottleNames),
    backend_name: s.backendName,
    agent_git_user: s.agentGitUser,
    pr_number: s.prNumber,
    status: s.status,
    last_checkin_at: s.lastCheckinAt,
    session_id: s.sessionId,
    cwd: s.cwd,
    created_at: s.createdAt,
    updated_at: s.updatedAt,
  };
}

/**
 * The state a row holds: a cheap structural check on the hot path (rows were
 * validated on the way in); zod runs only to explain a row that fails it (a
 * hand edit, a damaged file). `where` names the database in the error.
 */
export function rowToState(row: Row, where: string): ForgeState {
  const fast = fastRow(row);
  if (fast) return fast;
  let bottleNames: unknown;
  try {
    bottleNames = JSON.parse(row.bottle_names);
  } catch {
    bottleNames = row.bottle_names;
  }
  const result = ForgeStateSchema.safeParse({ ...rowFields(row), bottleNames });
  const why = result.success
    ? 'fields out of range'
    : result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
  throw new BbError(
    'STATE_CORRUPT',
    `row ${row.owner}/${row.repo}#${row.issue_number} in ${where} is invalid: ${why}`,
    { data: { path: where } },
  );
}

/** An `event_inbox` row as the SQL engines return it (PostgreSQL gives a bigint id as text). */
export interface InboxRow {
  id: number | string;
  key: string;
  issue: string | null;
  state: InboxState;
  occurred_at: string;
  received_at: string;
  payload: string;
}

export function toInboxEvent(r: InboxRow): InboxEvent {
  return {
    id: Number(r.id),
    key: r.key,
    issue: r.issue,
    state: r.state,
    occurredAt: r.occurred_at,
    receivedAt: r.received_at,
    payload: JSON.parse(r.payload) as unknown,
  };
}

/** A `webhook_deliveries` row as the SQL engines return it. */
export interface DeliveryRow {
  key: string;
  delivery_id: string | null;
  event: string | null;
  received_at: string;
}

export function toDeliveryRecord(row: DeliveryRow): DeliveryRecord {
  return {
    key: row.key,
    receivedAt: row.received_at,
    ...(row.delivery_id === null ? {} : { deliveryId: row.delivery_id }),
    ...(row.event === null ? {} : { event: row.event }),
  };
}
