import type { BbDatabase, Migration } from '@bb/state';
import type { Finding } from './analyse';
import type {
  DecisionChannel,
  DecisionScope,
  ProposalKind,
  RequestFile,
  RequestStatus,
} from './contract';

const MIGRATIONS: Migration[] = [
  {
    version: 1,
    up: `
      CREATE TABLE supervise_requests (
        id TEXT PRIMARY KEY,
        slug TEXT NOT NULL,
        kind TEXT NOT NULL,
        tool TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        turn INTEGER,
        base_text TEXT NOT NULL,
        base_hash TEXT NOT NULL,
        candidate_text TEXT NOT NULL,
        candidate_hash TEXT NOT NULL,
        justification TEXT NOT NULL,
        rerouted INTEGER NOT NULL DEFAULT 0,
        evidence TEXT NOT NULL DEFAULT '[]',
        findings TEXT NOT NULL DEFAULT '[]',
        decided_by TEXT,
        decided_at TEXT,
        scope TEXT,
        final_text TEXT,
        final_hash TEXT,
        reason TEXT,
        override INTEGER NOT NULL DEFAULT 0,
        remediation TEXT,
        remediated_at TEXT
      );
      CREATE INDEX supervise_requests_status ON supervise_requests (status, created_at);
      CREATE INDEX supervise_requests_slug ON supervise_requests (slug, created_at);
    `,
  },
  {
    // Through what each decision was made (forge comment, API, CLI, TUI, auto mode).
    version: 2,
    up: 'ALTER TABLE supervise_requests ADD COLUMN decided_via TEXT;',
  },
  {
    // Who applies a decision now (one desk of all the processes and replicas that see it).
    version: 3,
    up: `
      ALTER TABLE supervise_requests ADD COLUMN applying_by TEXT;
      ALTER TABLE supervise_requests ADD COLUMN applying_at TEXT;
      -- Before this, a decision was applied as it was made: one with no remediation was
      -- interrupted (the orchestrator stopped), and is not applied now, long after.
      UPDATE supervise_requests
        SET remediation = '{"ok":false,"detail":"interrupted: bot-bottle stopped before it was applied"}',
            remediated_at = decided_at
        WHERE status IN ('approved', 'modified') AND remediation IS NULL;
    `,
  },
];

/** A denial the proxies logged before the proposal: the evidence that triggered it. */
export interface Evidence {
  time: string;
  kind: 'egress' | 'credential';
  host: string;
  port: number;
  rule: string;
  method?: string;
  route?: string;
}

/** What a remediation did. */
export interface Remediation {
  ok: boolean;
  /** `reloaded` (proxies), `rebuilt` (image and agent), or what failed. */
  detail: string;
  image?: string;
}

/** A request as the host keeps it. */
export interface SuperviseRequest {
  id: string;
  slug: string;
  kind: ProposalKind;
  tool: string;
  status: RequestStatus;
  createdAt: string;
  expiresAt: string;
  /** The turn of the bottle it was made in. */
  turn: number | null;
  base: string;
  baseHash: string;
  candidate: string;
  candidateHash: string;
  justification: string;
  rerouted: boolean;
  evidence: Evidence[];
  findings: Finding[];
  decidedBy: string | null;
  /** Through what it was decided: a forge comment, the API, the CLI or TUI on the host, auto mode, or bot-bottle itself. */
  decidedVia: DecisionChannel | null;
  decidedAt: string | null;
  scope: DecisionScope | null;
  final: string | null;
  finalHash: string | null;
  reason: string | null;
  override: boolean;
  remediation: Remediation | null;
  remediatedAt: string | null;
}

export type Row = Record<string, unknown>;

/** Which requests `list` returns. */
export interface RequestFilter {
  status?: RequestStatus;
  slug?: string;
}

/** How a pending request is decided (`SuperviseRecords.decide`). */
export interface RequestDecision {
  status: Exclude<RequestStatus, 'pending'>;
  by: string;
  via: DecisionChannel;
  at: string;
  scope?: DecisionScope | undefined;
  final?: { text: string; hash: string } | undefined;
  reason?: string | undefined;
  override?: boolean | undefined;
  /** The desk that applies it, claimed with the decision (see `claimApply`). */
  applying?: { by: string; at: string } | undefined;
}

/** What a request holds beyond its file, as the desk takes it in. */
export interface IngestExtra {
  base: string;
  evidence: Evidence[];
  findings: Finding[];
  turn: number | null;
}

/**
 * Where supervise requests, decisions and remediations are kept: one orchestrator's
 * SQLite (`SuperviseStore`), or the PostgreSQL database a fleet of orchestrators
 * shares (`PostgresSuperviseStore` in `@bb/state-postgres`), so a request made in a
 * bottle of one replica is seen, and decided, through any. Checked by
 * `describeSuperviseRecords` (`@bb/supervise/testing`).
 */
export interface SuperviseRecords {
  /** Record a request the sidecar wrote, once (a second sight of the same id changes nothing): whether it was new. */
  ingest(r: RequestFile, extra: IngestExtra): Promise<boolean>;
  get(id: string): Promise<SuperviseRequest | undefined>;
  /** Which of `ids` are recorded (a sync asks for a bottle's whole exchange at once). */
  known(ids: readonly string[]): Promise<Set<string>>;
  /** Requests, oldest first; by status and/or bottle. */
  list(filter?: RequestFilter): Promise<SuperviseRequest[]>;
  /** Whether the bottle has a request waiting for the operator (its watchdog and turn budget pause). */
  hasPending(slug: string, now?: number): Promise<boolean>;
  /**
   * Decide a pending request. Only a pending one: a request decided meanwhile
   * (by another operator or replica, or expired) is left as it is and `false` returned.
   */
  decide(id: string, d: RequestDecision): Promise<boolean>;
  /**
   * Claim the applying of a decided, unapplied request for desk `by`: refused (`false`)
   * while another desk's claim is newer than `staleBefore` (a desk that died applying
   * leaves a claim that goes stale). Of several processes or replicas, one applies.
   */
  claimApply(id: string, by: string, at: string, staleBefore: string): Promise<boolean>;
  /**
   * What applying an approved request did, once: a second report is ignored
   * (`false`). With `by`, only while the applying is `by`'s claim: a desk whose claim
   * went stale and was taken over records nothing (the one that took it does).
   */
  recordRemediation(id: string, r: Remediation, at: string, by?: string): Promise<boolean>;
  /** Approved (or modified) requests not applied yet, oldest first: for the replica that runs their bottle. */
  unapplied(): Promise<SuperviseRequest[]>;
  /** Pending requests past their TTL. */
  expired(now?: number): Promise<SuperviseRequest[]>;
  /** Requests not granted (rejected or expired) in a row for a bottle and kind: the loop the operator is told about. */
  rejectionStreak(slug: string, kind: ProposalKind): Promise<number>;
}

/**
 * A request's columns in `INSERT` order (id, slug, kind, tool, created_at, expires_at,
 * turn, base_text, base_hash, candidate_text, candidate_hash, justification,
 * rerouted, evidence, findings): the same for SQLite and PostgreSQL.
 */
export function ingestValues(r: RequestFile, extra: IngestExtra): unknown[] {
  return [
    r.id,
    r.slug,
    r.kind,
    r.tool,
    r.createdAt,
    r.expiresAt,
    extra.turn,
    extra.base,
    r.baseHash,
    r.file,
    r.candidateHash,
    r.justification,
    r.rerouted ? 1 : 0,
    JSON.stringify(extra.evidence),
    JSON.stringify(extra.findings),
  ];
}

/**
 * A decision's columns in `UPDATE` order (status, decided_by, decided_via, decided_at,
 * scope, final_text, final_hash, reason, override, applying_by, applying_at).
 */
export function decisionValues(d: RequestDecision): unknown[] {
  return [
    d.status,
    d.by,
    d.via,
    d.at,
    d.scope ?? null,
    d.final?.text ?? null,
    d.final?.hash ?? null,
    d.reason ?? null,
    d.override ? 1 : 0,
    d.applying?.by ?? null,
    d.applying?.at ?? null,
  ];
}

/** How many of `statuses` (newest first) are rejections or expiries in a row. */
export function streakOf(statuses: readonly string[]): number {
  let n = 0;
  for (const s of statuses) {
    if (s !== 'rejected' && s !== 'expired') break;
    n++;
  }
  return n;
}

/** A row of `supervise_requests` (SQLite's or PostgreSQL's: the same columns) as a request. */
export const requestFromRow = (r: Row): SuperviseRequest => ({
  id: r['id'] as string,
  slug: r['slug'] as string,
  kind: r['kind'] as ProposalKind,
  tool: r['tool'] as string,
  status: r['status'] as RequestStatus,
  createdAt: r['created_at'] as string,
  expiresAt: r['expires_at'] as string,
  turn: (r['turn'] as number | null) ?? null,
  base: r['base_text'] as string,
  baseHash: r['base_hash'] as string,
  candidate: r['candidate_text'] as string,
  candidateHash: r['candidate_hash'] as string,
  justification: r['justification'] as string,
  rerouted: r['rerouted'] === 1 || r['rerouted'] === true,
  evidence: (typeof r['evidence'] === 'string'
    ? JSON.parse(r['evidence'])
    : r['evidence']) as Evidence[],
  findings: (typeof r['findings'] === 'string'
    ? JSON.parse(r['findings'])
    : r['findings']) as Finding[],
  decidedBy: (r['decided_by'] as string | null) ?? null,
  decidedVia: (r['decided_via'] as DecisionChannel | null) ?? null,
  decidedAt: (r['decided_at'] as string | null) ?? null,
  scope: (r['scope'] as DecisionScope | null) ?? null,
  final: (r['final_text'] as string | null) ?? null,
  finalHash: (r['final_hash'] as string | null) ?? null,
  reason: (r['reason'] as string | null) ?? null,
  override: r['override'] === 1 || r['override'] === true,
  remediation: r['remediation']
    ? ((typeof r['remediation'] === 'string'
        ? JSON.parse(r['remediation'])
        : r['remediation']) as Remediation)
    : null,
  remediatedAt: (r['remediated_at'] as string | null) ?? null,
});

/**
 * Supervise requests in bot-bottle's SQLite database: every proposal an agent made,
 * the operator's decision and what the remediation did. The database is the
 * record; the bottle's exchange directory only carries requests in and answers out.
 */
export class SuperviseStore implements SuperviseRecords {
  readonly #db: BbDatabase;
  constructor(db: BbDatabase) {
    this.#db = db;
    db.migrate('supervise', MIGRATIONS);
  }

  async ingest(r: RequestFile, extra: IngestExtra): Promise<boolean> {
    const res = this.#db.db
      .prepare(
        `INSERT OR IGNORE INTO supervise_requests
          (id, slug, kind, tool, status, created_at, expires_at, turn, base_text, base_hash,
           candidate_text, candidate_hash, justification, rerouted, evidence, findings)
         VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(...ingestValues(r, extra));
    return res.changes > 0;
  }

  async get(id: string): Promise<SuperviseRequest | undefined> {
    const r = this.#db.db.prepare('SELECT * FROM supervise_requests WHERE id = ?').get(id) as
      | Row
      | undefined;
    return r ? requestFromRow(r) : undefined;
  }

  async known(ids: readonly string[]): Promise<Set<string>> {
    const one = this.#db.db.prepare('SELECT 1 FROM supervise_requests WHERE id = ?');
    return new Set(ids.filter((id) => one.get(id)));
  }

  async list(filter: RequestFilter = {}): Promise<SuperviseRequest[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (filter.status) {
      where.push('status = ?');
      args.push(filter.status);
    }
    if (filter.slug) {
      where.push('slug = ?');
      args.push(filter.slug);
    }
    return (
      this.#db.db
        .prepare(
          `SELECT * FROM supervise_requests ${where.length ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY created_at, id`,
        )
        .all(...args) as Row[]
    ).map(requestFromRow);
  }

  async hasPending(slug: string, now = Date.now()): Promise<boolean> {
    return !!this.#db.db
      .prepare(
        "SELECT 1 FROM supervise_requests WHERE slug = ? AND status = 'pending' AND expires_at > ? LIMIT 1",
      )
      .get(slug, new Date(now).toISOString());
  }

  async decide(id: string, d: RequestDecision): Promise<boolean> {
    return (
      this.#db.db
        .prepare(
          `UPDATE supervise_requests SET status = ?, decided_by = ?, decided_via = ?, decided_at = ?,
             scope = ?, final_text = ?, final_hash = ?, reason = ?, override = ?,
             applying_by = ?, applying_at = ?
           WHERE id = ? AND status = 'pending'`,
        )
        .run(...decisionValues(d), id).changes > 0
    );
  }

  async claimApply(id: string, by: string, at: string, staleBefore: string): Promise<boolean> {
    return (
      this.#db.db
        .prepare(
          `UPDATE supervise_requests SET applying_by = ?, applying_at = ?
           WHERE id = ? AND status IN ('approved', 'modified') AND remediation IS NULL
             AND (applying_by IS NULL OR applying_by = ? OR applying_at < ?)`,
        )
        .run(by, at, id, by, staleBefore).changes > 0
    );
  }

  async recordRemediation(id: string, r: Remediation, at: string, by?: string): Promise<boolean> {
    return (
      this.#db.db
        .prepare(
          `UPDATE supervise_requests SET remediation = ?, remediated_at = ?
           WHERE id = ? AND remediation IS NULL AND (? IS NULL OR applying_by = ?)`,
        )
        .run(JSON.stringify(r), at, id, by ?? null, by ?? null).changes > 0
    );
  }

  async unapplied(): Promise<SuperviseRequest[]> {
    return (
      this.#db.db
        .prepare(
          "SELECT * FROM supervise_requests WHERE status IN ('approved', 'modified') AND remediation IS NULL ORDER BY decided_at, id",
        )
        .all() as Row[]
    ).map(requestFromRow);
  }

  async expired(now = Date.now()): Promise<SuperviseRequest[]> {
    return (
      this.#db.db
        .prepare("SELECT * FROM supervise_requests WHERE status = 'pending' AND expires_at <= ?")
        .all(new Date(now).toISOString()) as Row[]
    ).map(requestFromRow);
  }

  async rejectionStreak(slug: string, kind: ProposalKind): Promise<number> {
    const rows = this.#db.db
      .prepare(
        "SELECT status FROM supervise_requests WHERE slug = ? AND kind = ? AND status NOT IN ('pending', 'cancelled') ORDER BY decided_at DESC",
      )
      .all(slug, kind) as Array<{ status: string }>;
    return streakOf(rows.map((r) => r.status));
  }
}
