import { BbError, isBbError } from '@bb/errors';
import type Database from 'better-sqlite3';
import { BbDatabase, type Migration, mapSqliteError, type OpenDatabaseOptions } from './database';
import {
  checkDeliveryKey,
  type DeliveryLedger,
  type DeliveryMeta,
  type DeliveryRecord,
} from './delivery-ledger';
import { type ForgeState, parseForgeState, parseForgeStateKey } from './forge-state';
import {
  checkDate,
  checkHistoryOptions,
  checkInboxInput,
  checkRecent,
  checkSettle,
  type EventInbox,
  type InboxEvent,
  type InboxInput,
  type InboxState,
  initialState,
} from './inbox';
import {
  COLUMNS,
  cellsToRow,
  type DeliveryRow,
  type InboxRow,
  type Row,
  rowToState,
  stateToRow,
  toDeliveryRecord,
  toInboxEvent,
} from './rows';
import type { ForgeStateStore, HistoryOptions } from './store';

/** The `state` component's schema, oldest first. Append; never edit a shipped step. */
export const STATE_MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE forge_state (
        owner           TEXT    NOT NULL,
        repo            TEXT    NOT NULL,
        issue_number    INTEGER NOT NULL,
        slug            TEXT    NOT NULL UNIQUE,
        agent_name      TEXT    NOT NULL,
        bottle_names    TEXT    NOT NULL,
        backend_name    TEXT    NOT NULL,
        agent_git_user  TEXT    NOT NULL,
        pr_number       INTEGER,
        status          TEXT    NOT NULL CHECK (status IN ('running', 'frozen', 'destroyed')),
        last_checkin_at TEXT    NOT NULL,
        session_id      TEXT,
        cwd             TEXT,
        created_at      TEXT    NOT NULL,
        updated_at      TEXT    NOT NULL,
        PRIMARY KEY (owner, repo, issue_number)
      ) WITHOUT ROWID;
      CREATE TABLE webhook_deliveries (
        key         TEXT PRIMARY KEY,
        delivery_id TEXT,
        event       TEXT,
        received_at TEXT NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX webhook_deliveries_received_at ON webhook_deliveries (received_at);
    `,
  },
  {
    // Destroyed bottles move out of the hot table (kept for history, paged), a PR
    // finds its bottle through an index, and accepted events wait in a durable inbox.
    version: 2,
    up: `
      CREATE TABLE forge_state_history (
        owner           TEXT    NOT NULL,
        repo            TEXT    NOT NULL,
        issue_number    INTEGER NOT NULL,
        slug            TEXT    NOT NULL PRIMARY KEY,
        agent_name      TEXT    NOT NULL,
        bottle_names    TEXT    NOT NULL,
        backend_name    TEXT    NOT NULL,
        agent_git_user  TEXT    NOT NULL,
        pr_number       INTEGER,
        status          TEXT    NOT NULL CHECK (status = 'destroyed'),
        last_checkin_at TEXT    NOT NULL,
        session_id      TEXT,
        cwd             TEXT,
        created_at      TEXT    NOT NULL,
        updated_at      TEXT    NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX forge_state_history_issue
        ON forge_state_history (owner, repo, issue_number, updated_at);
      CREATE INDEX forge_state_history_updated ON forge_state_history (updated_at);
      INSERT OR REPLACE INTO forge_state_history SELECT * FROM forge_state WHERE status = 'destroyed';
      DELETE FROM forge_state WHERE status = 'destroyed';
      CREATE INDEX forge_state_pr ON forge_state (owner, repo, pr_number) WHERE pr_number IS NOT NULL;
      CREATE TABLE event_inbox (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        key         TEXT    NOT NULL UNIQUE,
        issue       TEXT,
        state       TEXT    NOT NULL CHECK (state IN ('pending', 'deferred', 'parked', 'done')),
        occurred_at TEXT    NOT NULL,
        received_at TEXT    NOT NULL,
        payload     TEXT    NOT NULL
      );
      CREATE INDEX event_inbox_open ON event_inbox (occurred_at, id) WHERE state != 'done';
      CREATE INDEX event_inbox_received ON event_inbox (received_at) WHERE state = 'done';
    `,
  },
  {
    // An issue's open events, read alone (each event handled with shared work asks).
    version: 3,
    up: `CREATE INDEX event_inbox_issue_open ON event_inbox (issue, occurred_at, id) WHERE state != 'done';`,
  },
];

/** The SQL the store runs, exported so the benchmark's baseline runs exactly the same. */
export const STATE_SQL = {
  upsert: `INSERT INTO forge_state (${COLUMNS})
    VALUES (@owner, @repo, @issue_number, @slug, @agent_name, @bottle_names, @backend_name, @agent_git_user,
            @pr_number, @status, @last_checkin_at, @session_id, @cwd, @created_at, @updated_at)
    ON CONFLICT (owner, repo, issue_number) DO UPDATE SET
      slug = excluded.slug, agent_name = excluded.agent_name, bottle_names = excluded.bottle_names,
      backend_name = excluded.backend_name, agent_git_user = excluded.agent_git_user,
      pr_number = excluded.pr_number, status = excluded.status, last_checkin_at = excluded.last_checkin_at,
      session_id = excluded.session_id, cwd = excluded.cwd, updated_at = excluded.updated_at`,
  get: `SELECT ${COLUMNS} FROM forge_state WHERE owner = ? AND repo = ? AND issue_number = ?`,
  delete: 'DELETE FROM forge_state WHERE owner = ? AND repo = ? AND issue_number = ?',
  all: `SELECT ${COLUMNS} FROM forge_state ORDER BY owner, repo, issue_number`,
  recordDelivery: `INSERT INTO webhook_deliveries (key, delivery_id, event, received_at)
    VALUES (?, ?, ?, ?) ON CONFLICT (key) DO NOTHING`,
  getDelivery: 'SELECT key, delivery_id, event, received_at FROM webhook_deliveries WHERE key = ?',
  pruneDeliveries: 'DELETE FROM webhook_deliveries WHERE received_at < ?',
  byPr: `SELECT ${COLUMNS} FROM forge_state WHERE owner = ? AND repo = ? AND pr_number = ? LIMIT 1`,
  histUpsert: `INSERT INTO forge_state_history (${COLUMNS})
    VALUES (@owner, @repo, @issue_number, @slug, @agent_name, @bottle_names, @backend_name, @agent_git_user,
            @pr_number, @status, @last_checkin_at, @session_id, @cwd, @created_at, @updated_at)
    ON CONFLICT (slug) DO UPDATE SET
      owner = excluded.owner, repo = excluded.repo, issue_number = excluded.issue_number,
      agent_name = excluded.agent_name, bottle_names = excluded.bottle_names,
      backend_name = excluded.backend_name, agent_git_user = excluded.agent_git_user,
      pr_number = excluded.pr_number, status = excluded.status, last_checkin_at = excluded.last_checkin_at,
      session_id = excluded.session_id, cwd = excluded.cwd, updated_at = excluded.updated_at`,
  histLatest: `SELECT ${COLUMNS} FROM forge_state_history
    WHERE owner = ? AND repo = ? AND issue_number = ? ORDER BY updated_at DESC LIMIT 1`,
  histPage: `SELECT ${COLUMNS} FROM forge_state_history WHERE updated_at < ?
    ORDER BY updated_at DESC, slug LIMIT ?`,
  histDelete: 'DELETE FROM forge_state_history WHERE owner = ? AND repo = ? AND issue_number = ?',
  inboxInsert: `INSERT INTO event_inbox (key, issue, state, occurred_at, received_at, payload)
    VALUES (?, ?, ?, ?, ?, ?)`,
  inboxOpen: `SELECT id, key, issue, state, occurred_at, received_at, payload FROM event_inbox
    WHERE state != 'done' ORDER BY occurred_at, id`,
  inboxOpenOf: `SELECT id, key, issue, state, occurred_at, received_at, payload FROM event_inbox
    WHERE issue = ? AND state != 'done' ORDER BY occurred_at, id`,
  inboxSettle: 'UPDATE event_inbox SET state = ?, issue = ? WHERE id = ?',
  inboxPrune: "DELETE FROM event_inbox WHERE state = 'done' AND received_at < ?",
  // A key range, not LIKE (case-insensitive, and no index): keys are unique and indexed.
  inboxRecent: `SELECT id, key, issue, state, occurred_at, received_at, payload FROM event_inbox
    WHERE key >= ? AND key < ? ORDER BY id DESC LIMIT ?`,
} as const;

export interface SqliteForgeStateStoreOptions extends OpenDatabaseOptions {
  /** Use an already open database instead of opening one. The store does not close it. */
  database?: BbDatabase;
}

/**
 * The forge state store and delivery ledger on SQLite (better-sqlite3): one file,
 * shared safely by several processes (WAL, busy timeout, atomic upserts).
 */
export class SqliteForgeStateStore implements ForgeStateStore, DeliveryLedger, EventInbox {
  readonly database: BbDatabase;
  readonly #owned: boolean;
  readonly #stmts: { [K in keyof typeof STATE_SQL]: Database.Statement };
  readonly #retire: (row: Row) => void;
  readonly #accept: (
    key: string,
    e: InboxInput & { payloadJson: string },
  ) => { id: number; receivedAt: string; issue: string | null; state: InboxState } | undefined;

  constructor(options: SqliteForgeStateStoreOptions = {}) {
    this.#owned = options.database === undefined;
    this.database = options.database ?? BbDatabase.open(options);
    try {
      this.database.migrate('state', STATE_MIGRATIONS);
      const db = this.database.db;
      this.#stmts = {
        upsert: db.prepare(STATE_SQL.upsert),
        // Arrays, not objects: the state is built from them in one step.
        get: db.prepare(STATE_SQL.get).raw(true),
        delete: db.prepare(STATE_SQL.delete),
        all: db.prepare(STATE_SQL.all).raw(true),
        recordDelivery: db.prepare(STATE_SQL.recordDelivery),
        getDelivery: db.prepare(STATE_SQL.getDelivery),
        pruneDeliveries: db.prepare(STATE_SQL.pruneDeliveries),
        byPr: db.prepare(STATE_SQL.byPr).raw(true),
        histUpsert: db.prepare(STATE_SQL.histUpsert),
        histLatest: db.prepare(STATE_SQL.histLatest).raw(true),
        histPage: db.prepare(STATE_SQL.histPage).raw(true),
        histDelete: db.prepare(STATE_SQL.histDelete),
        inboxInsert: db.prepare(STATE_SQL.inboxInsert),
        inboxOpen: db.prepare(STATE_SQL.inboxOpen),
        inboxOpenOf: db.prepare(STATE_SQL.inboxOpenOf),
        inboxSettle: db.prepare(STATE_SQL.inboxSettle),
        inboxPrune: db.prepare(STATE_SQL.inboxPrune),
        inboxRecent: db.prepare(STATE_SQL.inboxRecent),
      };
      // A destroyed bottle leaves the hot table for its history, in one step.
      this.#retire = db.transaction((row: Row) => {
        const live = this.#stmts.get.get(row.owner, row.repo, row.issue_number) as
          | unknown[]
          | undefined;
        const kept = live ? cellsToRow(live) : undefined;
        this.#stmts.histUpsert.run({
          ...row,
          created_at: kept && kept.slug === row.slug ? kept.created_at : row.created_at,
        });
        if (kept && kept.slug === row.slug)
          this.#stmts.delete.run(row.owner, row.repo, row.issue_number);
      });
      const runningIn = db.prepare(
        "SELECT 1 FROM forge_state WHERE owner = ? AND repo = ? AND status = 'running' LIMIT 1",
      );
      this.#accept = db.transaction((key: string, e: InboxInput & { payloadJson: string }) => {
        const now = new Date().toISOString();
        const info = this.#stmts.recordDelivery.run(key, e.deliveryId ?? null, e.kind ?? null, now);
        if (info.changes !== 1) return undefined;
        let issue = e.issue;
        let state = initialState(e);
        if (e.byPr && issue === null) {
          // Routed in the same write: the live bottle whose PR it is, if any.
          const r = e.byPr;
          const owner = this.#stmts.byPr.get(r.owner, r.repo, r.pr) as unknown[] | undefined;
          if (owner) {
            issue = `${r.owner}/${r.repo}#${cellsToRow(owner).issue_number}`;
            state = e.done ? 'done' : 'pending';
          } else
            state =
              !e.done && r.unclaimed === 'parkIfRunning' && runningIn.get(r.owner, r.repo)
                ? 'parked'
                : 'done';
        }
        const row = this.#stmts.inboxInsert.run(
          key,
          issue,
          state,
          e.occurredAt,
          now,
          e.payloadJson,
        );
        return { id: Number(row.lastInsertRowid), receivedAt: now, issue, state };
      });
    } catch (err) {
      if (this.#owned) this.database.close();
      throw err;
    }
  }

  /** The database file's path. */
  get path(): string {
    return this.database.path;
  }

  upsert(state: ForgeState): void {
    const s = parseForgeState(state);
    if (s.status === 'destroyed') {
      this.#write('upsert', () => this.#retire(stateToRow(s)));
      return;
    }
    this.#write('upsert', () => {
      try {
        this.#stmts.upsert.run(stateToRow(s));
      } catch (err) {
        if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') {
          throw new BbError(
            'CONFLICT',
            `slug ${JSON.stringify(s.slug)} already belongs to another issue; choose another slug`,
            { cause: err, data: { slug: s.slug } },
          );
        }
        throw err;
      }
    });
  }

  get(owner: string, repo: string, issueNumber: number): ForgeState | undefined {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    let cells: unknown[] | undefined;
    try {
      cells = this.#stmts.get.get(k.owner, k.repo, k.issueNumber) as unknown[] | undefined;
    } catch (err) {
      throw mapSqliteError(err, this.database.path, 'read');
    }
    if (cells) return this.#fromRow(cellsToRow(cells));
    const old = this.#read('read', () =>
      this.#stmts.histLatest.get(k.owner, k.repo, k.issueNumber),
    ) as unknown[] | undefined;
    return old ? this.#fromRow(cellsToRow(old)) : undefined;
  }

  delete(owner: string, repo: string, issueNumber: number): void {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    this.#write('delete', () => {
      this.#stmts.delete.run(k.owner, k.repo, k.issueNumber);
      this.#stmts.histDelete.run(k.owner, k.repo, k.issueNumber);
    });
  }

  findByPr(owner: string, repo: string, pr: number): ForgeState | undefined {
    const k = parseForgeStateKey(owner, repo, pr);
    const cells = this.#read('read', () => this.#stmts.byPr.get(k.owner, k.repo, k.issueNumber)) as
      | unknown[]
      | undefined;
    return cells ? this.#fromRow(cellsToRow(cells)) : undefined;
  }

  history(options: HistoryOptions = {}): ForgeState[] {
    const { limit, before } = checkHistoryOptions(options);
    const rows = this.#read('list', () => this.#stmts.histPage.all(before, limit)) as unknown[][];
    return rows.map((cells) => this.#fromRow(cellsToRow(cells)));
  }

  accept(key: string, event: InboxInput): InboxEvent | undefined {
    checkDeliveryKey(key);
    const e = checkInboxInput(event);
    const stored = this.#write('accept an event in', () => this.#accept(key, e));
    if (!stored) return undefined;
    return {
      id: stored.id,
      key,
      issue: stored.issue,
      state: stored.state,
      occurredAt: e.occurredAt,
      receivedAt: stored.receivedAt,
      payload: JSON.parse(e.payloadJson),
    };
  }

  openEvents(): InboxEvent[] {
    return (this.#read('read the inbox of', () => this.#stmts.inboxOpen.all()) as InboxRow[]).map(
      toInboxEvent,
    );
  }

  openEventsOf(issue: string): InboxEvent[] {
    return (
      this.#read('read the inbox of', () => this.#stmts.inboxOpenOf.all(issue)) as InboxRow[]
    ).map(toInboxEvent);
  }

  recentEvents(prefix: string, limit: number): InboxEvent[] {
    checkRecent(prefix, limit);
    return (
      this.#read('read the inbox of', () =>
        this.#stmts.inboxRecent.all(prefix, `${prefix}\u{10ffff}`, limit),
      ) as InboxRow[]
    ).map(toInboxEvent);
  }

  settle(id: number, state: InboxState, issue?: string | null): void {
    checkSettle(id, state);
    this.#write('update the inbox of', () => {
      const current = issue === undefined ? this.#issueOf(id) : issue;
      this.#stmts.inboxSettle.run(state, current, id);
    });
  }

  pruneInbox(before: Date): number {
    checkDate(before, 'pruneInbox');
    return this.#write(
      'prune the inbox of',
      () => this.#stmts.inboxPrune.run(before.toISOString()).changes,
    );
  }

  #issueOf(id: number): string | null {
    const row = this.database.db.prepare('SELECT issue FROM event_inbox WHERE id = ?').get(id) as
      | { issue: string | null }
      | undefined;
    return row?.issue ?? null;
  }

  all(): ForgeState[] {
    const rows = this.#read('list', () => this.#stmts.all.all()) as unknown[][];
    return rows.map((cells) => this.#fromRow(cellsToRow(cells)));
  }

  recordDelivery(key: string, meta: DeliveryMeta = {}): boolean {
    checkDeliveryKey(key);
    return this.#write('record delivery in', () => {
      const info = this.#stmts.recordDelivery.run(
        key,
        meta.deliveryId ?? null,
        meta.event ?? null,
        new Date().toISOString(),
      );
      return info.changes === 1;
    });
  }

  getDelivery(key: string): DeliveryRecord | undefined {
    checkDeliveryKey(key);
    const row = this.#read('read delivery from', () => this.#stmts.getDelivery.get(key)) as
      | DeliveryRow
      | undefined;
    return row ? toDeliveryRecord(row) : undefined;
  }

  pruneDeliveries(before: Date): number {
    if (!(before instanceof Date) || Number.isNaN(before.getTime())) {
      throw new BbError(
        'INVALID_INPUT',
        `pruneDeliveries needs a valid Date, got ${String(before)}`,
      );
    }
    return this.#write(
      'prune deliveries in',
      () => this.#stmts.pruneDeliveries.run(before.toISOString()).changes,
    );
  }

  /** Close the database if this store opened it. */
  close(): void {
    if (this.#owned) this.database.close();
  }

  #write<T>(action: string, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw isBbError(err) ? err : mapSqliteError(err, this.database.path, action);
    }
  }

  #read<T>(action: string, fn: () => T): T {
    return this.#write(action, fn);
  }

  #fromRow(row: Row): ForgeState {
    return rowToState(row, this.database.path);
  }
}
