import { BbError } from '@bb/errors';
import {
  COLUMNS,
  checkDate,
  checkDeliveryKey,
  checkHistoryOptions,
  checkInboxInput,
  checkRecent,
  checkSettle,
  type DeliveryLedger,
  type DeliveryMeta,
  type DeliveryRecord,
  type DeliveryRow,
  type EventInbox,
  type ForgeState,
  type ForgeStateStore,
  type HistoryOptions,
  type InboxEvent,
  type InboxInput,
  type InboxRow,
  type InboxState,
  initialState,
  parseForgeState,
  parseForgeStateKey,
  type Row,
  rowToState,
  stateToRow,
  toDeliveryRecord,
  toInboxEvent,
  type UnleasedWork,
} from '@bb/state';
import type { PostgresDatabase } from './database';
import { STATE_PG_MIGRATIONS } from './migrations';

const VALUES = '$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15';
const SET = `slug = excluded.slug, agent_name = excluded.agent_name, bottle_names = excluded.bottle_names,
      backend_name = excluded.backend_name, agent_git_user = excluded.agent_git_user,
      pr_number = excluded.pr_number, status = excluded.status, last_checkin_at = excluded.last_checkin_at,
      session_id = excluded.session_id, cwd = excluded.cwd, updated_at = excluded.updated_at`;
const INBOX_COLUMNS = 'id, key, issue, state, occurred_at, received_at, payload';

/** The SQL the store runs, exported so the benchmark's baseline runs exactly the same. */
export const PG_STATE_SQL = {
  upsert: `INSERT INTO forge_state (${COLUMNS}) VALUES (${VALUES})
    ON CONFLICT (owner, repo, issue_number) DO UPDATE SET ${SET}`,
  get: `SELECT ${COLUMNS} FROM forge_state WHERE owner = $1 AND repo = $2 AND issue_number = $3`,
  histLatest: `SELECT ${COLUMNS} FROM forge_state_history
    WHERE owner = $1 AND repo = $2 AND issue_number = $3 ORDER BY updated_at DESC LIMIT 1`,
  histUpsert: `INSERT INTO forge_state_history (${COLUMNS}) VALUES (${VALUES})
    ON CONFLICT (slug) DO UPDATE SET owner = excluded.owner, repo = excluded.repo,
      issue_number = excluded.issue_number, ${SET.replace('slug = excluded.slug, ', '')}`,
  // A destroyed bottle's live row leaves with it; its creation time is kept.
  retireLive: `DELETE FROM forge_state WHERE owner = $1 AND repo = $2 AND issue_number = $3 AND slug = $4
    RETURNING created_at`,
  delete: 'DELETE FROM forge_state WHERE owner = $1 AND repo = $2 AND issue_number = $3',
  histDelete:
    'DELETE FROM forge_state_history WHERE owner = $1 AND repo = $2 AND issue_number = $3',
  all: `SELECT ${COLUMNS} FROM forge_state ORDER BY owner, repo, issue_number`,
  byPr: `SELECT ${COLUMNS} FROM forge_state WHERE owner = $1 AND repo = $2 AND pr_number = $3 LIMIT 1`,
  histPage: `SELECT ${COLUMNS} FROM forge_state_history WHERE updated_at < $1
    ORDER BY updated_at DESC, slug LIMIT $2`,
  recordDelivery: `INSERT INTO webhook_deliveries (key, delivery_id, event, received_at)
    VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING`,
  getDelivery: 'SELECT key, delivery_id, event, received_at FROM webhook_deliveries WHERE key = $1',
  pruneDeliveries: 'DELETE FROM webhook_deliveries WHERE received_at < $1',
  // The ledger entry and the event in one statement: the event exists only if the key
  // was new. With a PR to route by ($9-$12), its issue and state are found in the same
  // statement: the live bottle whose PR it is; else parked while a bottle runs in
  // that repository (when $12 says so), else done. $6 is the state when not routed.
  accept: `WITH fresh AS (
      INSERT INTO webhook_deliveries (key, delivery_id, event, received_at)
      VALUES ($1, $2, $3, $4) ON CONFLICT (key) DO NOTHING RETURNING key
    ), owner AS (
      SELECT CASE WHEN $5::text IS NOT NULL OR $9::text IS NULL THEN $5::text
        ELSE (SELECT owner || '/' || repo || '#' || issue_number FROM forge_state
              WHERE owner = $9::text AND repo = $10::text AND pr_number = $11::int LIMIT 1)
      END AS issue
    ), ins AS (
      INSERT INTO event_inbox (key, issue, state, occurred_at, received_at, payload)
      SELECT fresh.key, owner.issue,
      CASE
        WHEN $9::text IS NULL OR $5::text IS NOT NULL THEN $6::text
        WHEN $13::boolean THEN 'done'
        WHEN owner.issue IS NOT NULL THEN 'pending'
        WHEN $12::text = 'parkIfRunning' AND EXISTS (
          SELECT 1 FROM forge_state WHERE owner = $9::text AND repo = $10::text AND status = 'running'
        ) THEN 'parked'
        ELSE 'done'
      END,
      $7, $4, $8
      FROM fresh, owner RETURNING id, issue, state
    ), heard AS (
      -- Whoever holds the issue hears of it at once (watchPending), at the commit.
      SELECT pg_notify('bb_inbox', current_schema() || ' ' || id || ' ' || issue || ' ' || $1)
      FROM ins
      WHERE state = 'pending' AND issue IS NOT NULL
    )
    SELECT id, issue, state FROM ins WHERE (SELECT count(*) FROM heard) >= 0`,
  inboxOpen: `SELECT ${INBOX_COLUMNS} FROM event_inbox WHERE state <> 'done' ORDER BY occurred_at, id`,
  // What nobody else holds (UnleasedWork): $1 is the lease names' prefix, $2 the asker.
  unleasedRows: `SELECT ${COLUMNS} FROM forge_state f WHERE NOT EXISTS (
      SELECT 1 FROM work_leases l WHERE l.name = $1 || f.owner || '/' || f.repo || '#' || f.issue_number
        AND l.holder <> '' AND l.holder <> $2 AND l.expires_at > now())
    ORDER BY owner, repo, issue_number`,
  unleasedEvents: `SELECT ${INBOX_COLUMNS} FROM event_inbox e WHERE e.state <> 'done' AND (
      e.issue IS NULL OR NOT EXISTS (
        SELECT 1 FROM work_leases l WHERE l.name = $1 || e.issue
          AND l.holder <> '' AND l.holder <> $2 AND l.expires_at > now()))
    ORDER BY occurred_at, id`,
  inboxOpenOf: `SELECT ${INBOX_COLUMNS} FROM event_inbox WHERE issue = $1 AND state <> 'done'
    ORDER BY occurred_at, id`,
  inboxSettle: 'UPDATE event_inbox SET state = $1, issue = COALESCE($2, issue) WHERE id = $3',
  inboxRoute: 'UPDATE event_inbox SET state = $1, issue = $2 WHERE id = $3',
  inboxPrune: "DELETE FROM event_inbox WHERE state = 'done' AND received_at < $1",
  inboxRecent: `SELECT ${INBOX_COLUMNS} FROM event_inbox WHERE key >= $1 AND key < $2
    ORDER BY id DESC LIMIT $3`,
} as const;

/** The row's fields in `COLUMNS` order, as query parameters. */
export function rowValues(r: Row): unknown[] {
  return [
    r.owner,
    r.repo,
    r.issue_number,
    r.slug,
    r.agent_name,
    r.bottle_names,
    r.backend_name,
    r.agent_git_user,
    r.pr_number,
    r.status,
    r.last_checkin_at,
    r.session_id,
    r.cwd,
    r.created_at,
    r.updated_at,
  ];
}

/**
 * The forge state store, delivery ledger and event inbox on PostgreSQL: the
 * same behaviour as `SqliteForgeStateStore` (both pass `@bb/state/testing`),
 * safe for several orchestrator processes on several machines at once.
 * Create it with `PostgresForgeStateStore.open(db)`: it migrates its tables.
 */
export class PostgresForgeStateStore
  implements ForgeStateStore, DeliveryLedger, EventInbox, UnleasedWork
{
  private constructor(readonly database: PostgresDatabase) {}

  static async open(database: PostgresDatabase): Promise<PostgresForgeStateStore> {
    await database.migrate('state', STATE_PG_MIGRATIONS);
    return new PostgresForgeStateStore(database);
  }

  async upsert(state: ForgeState): Promise<void> {
    const s = parseForgeState(state);
    const row = stateToRow(s);
    if (s.status === 'destroyed') {
      await this.database.transaction('retire a bottle in', async (c) => {
        const live = await c.query<{ created_at: string }>(PG_STATE_SQL.retireLive, [
          row.owner,
          row.repo,
          row.issue_number,
          row.slug,
        ]);
        const createdAt = live.rows[0]?.created_at ?? row.created_at;
        await c.query(PG_STATE_SQL.histUpsert, rowValues({ ...row, created_at: createdAt }));
      });
      return;
    }
    try {
      await this.database.query('upsert', PG_STATE_SQL.upsert, rowValues(row));
    } catch (err) {
      const pgCode = (err as { data?: { pg?: string } }).data?.pg;
      if (pgCode === '23505')
        throw new BbError(
          'CONFLICT',
          `slug ${JSON.stringify(s.slug)} already belongs to another issue; choose another slug`,
          { cause: err, data: { slug: s.slug } },
        );
      throw err;
    }
  }

  async get(owner: string, repo: string, issueNumber: number): Promise<ForgeState | undefined> {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    const args = [k.owner, k.repo, k.issueNumber];
    const live = await this.database.query<Row>('read', PG_STATE_SQL.get, args);
    if (live.rows[0]) return rowToState(live.rows[0], this.database.where);
    const old = await this.database.query<Row>('read', PG_STATE_SQL.histLatest, args);
    return old.rows[0] ? rowToState(old.rows[0], this.database.where) : undefined;
  }

  async delete(owner: string, repo: string, issueNumber: number): Promise<void> {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    const args = [k.owner, k.repo, k.issueNumber];
    await this.database.transaction('delete', async (c) => {
      await c.query(PG_STATE_SQL.delete, args);
      await c.query(PG_STATE_SQL.histDelete, args);
    });
  }

  async all(): Promise<ForgeState[]> {
    const r = await this.database.query<Row>('list', PG_STATE_SQL.all);
    return r.rows.map((row) => rowToState(row, this.database.where));
  }

  /**
   * Live rows whose issue's lease nobody but `holder` holds (`UnleasedWork`): the leases must be in
   * this database and schema (`PostgresLeaseStore` on the same `PostgresDatabase`).
   */
  async unleasedRows(prefix: string, holder: string): Promise<ForgeState[]> {
    const r = await this.database.query<Row>(
      'list unleased bottles in',
      PG_STATE_SQL.unleasedRows,
      [prefix, holder],
    );
    return r.rows.map((row) => rowToState(row, this.database.where));
  }

  /** Open events whose issue's lease nobody but `holder` holds, and parked ones (`UnleasedWork`). */
  async unleasedEvents(prefix: string, holder: string): Promise<InboxEvent[]> {
    const r = await this.database.query<InboxRow>(
      'read the unleased inbox of',
      PG_STATE_SQL.unleasedEvents,
      [prefix, holder],
    );
    return r.rows.map(toInboxEvent);
  }

  async findByPr(owner: string, repo: string, pr: number): Promise<ForgeState | undefined> {
    const k = parseForgeStateKey(owner, repo, pr);
    const r = await this.database.query<Row>('read', PG_STATE_SQL.byPr, [
      k.owner,
      k.repo,
      k.issueNumber,
    ]);
    return r.rows[0] ? rowToState(r.rows[0], this.database.where) : undefined;
  }

  async history(options: HistoryOptions = {}): Promise<ForgeState[]> {
    const { limit, before } = checkHistoryOptions(options);
    const r = await this.database.query<Row>('list', PG_STATE_SQL.histPage, [before, limit]);
    return r.rows.map((row) => rowToState(row, this.database.where));
  }

  async recordDelivery(key: string, meta: DeliveryMeta = {}): Promise<boolean> {
    checkDeliveryKey(key);
    const r = await this.database.query('record a delivery in', PG_STATE_SQL.recordDelivery, [
      key,
      meta.deliveryId ?? null,
      meta.event ?? null,
      new Date().toISOString(),
    ]);
    return r.rowCount === 1;
  }

  async getDelivery(key: string): Promise<DeliveryRecord | undefined> {
    checkDeliveryKey(key);
    const r = await this.database.query<DeliveryRow>(
      'read a delivery from',
      PG_STATE_SQL.getDelivery,
      [key],
    );
    return r.rows[0] ? toDeliveryRecord(r.rows[0]) : undefined;
  }

  async pruneDeliveries(before: Date): Promise<number> {
    checkDate(before, 'pruneDeliveries');
    const r = await this.database.query('prune deliveries in', PG_STATE_SQL.pruneDeliveries, [
      before.toISOString(),
    ]);
    return r.rowCount ?? 0;
  }

  async accept(key: string, event: InboxInput): Promise<InboxEvent | undefined> {
    checkDeliveryKey(key);
    const e = checkInboxInput(event);
    const now = new Date().toISOString();
    const route = e.issue === null ? e.byPr : undefined;
    const r = await this.database.query<{ id: string; issue: string | null; state: InboxState }>(
      'accept an event in',
      PG_STATE_SQL.accept,
      [
        key,
        e.deliveryId ?? null,
        e.kind ?? null,
        now,
        e.issue,
        initialState(e),
        e.occurredAt,
        e.payloadJson,
        route?.owner ?? null,
        route?.repo ?? null,
        route?.pr ?? null,
        route?.unclaimed ?? null,
        e.done === true,
      ],
    );
    const row = r.rows[0];
    if (row === undefined) return undefined;
    return {
      id: Number(row.id),
      key,
      issue: row.issue,
      state: row.state,
      occurredAt: e.occurredAt,
      receivedAt: now,
      payload: JSON.parse(e.payloadJson),
    };
  }

  /**
   * Hear, as each commits, each pending event accepted (by any process on this
   * database and schema): its id, issue and key; `null` after the database was away
   * (read them all).
   */
  watchPending(
    listener: (event: { id: number; issue: string; key: string } | null) => void,
  ): () => void {
    const prefix = `${this.database.schema} `;
    return this.database.listen(
      'bb_inbox',
      (payload) => {
        if (!payload.startsWith(prefix)) return;
        // `<id> <issue> <key>`: neither an id nor an issue key has a space; the key may.
        const [id, issue, ...key] = payload.slice(prefix.length).split(' ');
        const n = Number(id);
        if (Number.isSafeInteger(n) && issue && key.length > 0)
          listener({ id: n, issue, key: key.join(' ') });
      },
      () => listener(null),
    );
  }

  async openEvents(): Promise<InboxEvent[]> {
    const r = await this.database.query<InboxRow>('read the inbox of', PG_STATE_SQL.inboxOpen);
    return r.rows.map(toInboxEvent);
  }

  async openEventsOf(issue: string): Promise<InboxEvent[]> {
    const r = await this.database.query<InboxRow>('read the inbox of', PG_STATE_SQL.inboxOpenOf, [
      issue,
    ]);
    return r.rows.map(toInboxEvent);
  }

  async settle(id: number, state: InboxState, issue?: string | null): Promise<void> {
    checkSettle(id, state);
    if (issue === undefined)
      await this.database.query('update the inbox of', PG_STATE_SQL.inboxSettle, [state, null, id]);
    else
      await this.database.query('update the inbox of', PG_STATE_SQL.inboxRoute, [state, issue, id]);
  }

  async pruneInbox(before: Date): Promise<number> {
    checkDate(before, 'pruneInbox');
    const r = await this.database.query('prune the inbox of', PG_STATE_SQL.inboxPrune, [
      before.toISOString(),
    ]);
    return r.rowCount ?? 0;
  }

  async recentEvents(prefix: string, limit: number): Promise<InboxEvent[]> {
    checkRecent(prefix, limit);
    const r = await this.database.query<InboxRow>('read the inbox of', PG_STATE_SQL.inboxRecent, [
      prefix,
      `${prefix}\u{10ffff}`,
      limit,
    ]);
    return r.rows.map(toInboxEvent);
  }
}
