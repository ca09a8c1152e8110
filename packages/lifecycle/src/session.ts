import type { ForgeState } from '@bb/state';
import { INITIAL, type LifecycleState, type WatchdogReason } from './machine';
import { issueKey, parseIssueKey } from './routing';
import type { TurnMonitor } from './turn-monitor';

/** Why a turn was stopped from outside (the watchdog, a close, the operator). */
export interface Fired {
  reason: WatchdogReason;
  detail: string;
  /** `vanished` only: the engine the turn ran on, lost with its machine (`TurnOutcome.lostWith`). */
  lostWith?: string;
}

/** How a session's row is written (the orchestrator's store, through its lease). */
export interface RowWriter {
  /** Write `session`'s row with `status`; nothing when the issue is no longer this process's. */
  write(session: BottleSession, status: ForgeState['status']): Promise<void>;
}

/**
 * Everything this process holds of one issue's bottle: the lifecycle state the
 * machine decides on, the turn being watched, why it was stopped, the
 * watchdog's pause for the operator, and the bottle's row. The row is written
 * here only, from the state here: `commit` changes the status and writes it,
 * so the two cannot disagree once a step of work is done.
 */
export class BottleSession {
  readonly key: string;
  readonly owner: string;
  readonly repo: string;
  readonly issue: number;
  slug = '';
  agent = '';
  #state: LifecycleState = INITIAL;
  /** Inbox events whose comments wait in `state.pending`. */
  deferred: number[] = [];
  /** The last head each of its PRs was seen at (for "new commits a..b"). */
  heads?: Record<number, string>;
  /** Bottle manifests its launch asked for (a `bot-bottle-bottle:` label). */
  bottles?: string[] | undefined;
  /** The turn being watched (kept, closed, until its end is written). */
  monitor: TurnMonitor | undefined;
  /** Being launched or resumed: the watchdog leaves its row alone until its turn starts. */
  starting = false;
  /** Why its turn is being stopped from outside, once. */
  fired: Fired | undefined;
  /** When a check-in was last written to its row. */
  checkinSavedAt = 0;
  /** The watchdog's pause for the operator: since when in this turn, and its last moment. */
  pause: { since: number; last: number } | undefined;
  readonly #rows: RowWriter;
  #lastWrite: Promise<void> = Promise.resolve();

  constructor(key: string, rows: RowWriter) {
    const { owner, repo, issue } = parseIssueKey(key);
    this.key = key;
    this.owner = owner;
    this.repo = repo;
    this.issue = issue;
    this.#rows = rows;
  }

  get state(): LifecycleState {
    return this.#state;
  }

  /**
   * Take what the machine decided, except the status: a status changes only by
   * `commit`, when what it names happened (a launch, a resume, a turn's end, a
   * removal).
   */
  decided(next: LifecycleState): void {
    this.#state = { ...next, status: this.#state.status };
  }

  /** Change what is held without a row write (PRs learned, a reset after a failed launch). */
  set(state: LifecycleState): void {
    this.#state = state;
  }

  /**
   * Move to `state` and write the row with its status; resolves once written.
   * A write that fails puts the state back (memory never says what the row does not).
   */
  async commit(state: LifecycleState): Promise<void> {
    const before = this.#state;
    this.#state = state;
    try {
      await this.save();
    } catch (err) {
      if (this.#state === state) this.#state = before;
      throw err;
    }
  }

  /**
   * Write the row as the state is when the write's turn comes. Writes of one
   * bottle happen one after another, in the order asked (a check-in's write never
   * lands after the turn's end); `only` skips the write when the status is no
   * longer one it names.
   */
  save(only?: ReadonlyArray<ForgeState['status']>): Promise<void> {
    const write = this.#lastWrite
      .catch(() => {})
      .then(() => {
        const status = this.#state.status;
        if (status === 'none' || (only && !only.includes(status))) return;
        return this.#rows.write(this, status);
      });
    this.#lastWrite = write;
    return write;
  }

  /** Take over `other`'s turn (its watch, start, stop reason, pause and row writes): same bottle. */
  carryTurn(other: BottleSession): void {
    this.monitor = other.monitor;
    this.starting = other.starting;
    this.fired = other.fired;
    this.checkinSavedAt = other.checkinSavedAt;
    this.pause = other.pause;
    this.#lastWrite = other.#lastWrite;
    other.monitor = undefined;
  }

  /** The turn's watch is over (its end was written). */
  unwatch(): void {
    this.monitor?.close();
    this.monitor = undefined;
  }
}

/** The sessions of this process, by issue key and by slug. */
export class Sessions {
  readonly #byKey = new Map<string, BottleSession>();
  readonly #rows: RowWriter;

  constructor(rows: RowWriter) {
    this.#rows = rows;
  }

  get(key: string): BottleSession | undefined {
    return this.#byKey.get(key);
  }

  /** The issue's session, made empty (no bottle yet) when there is none. */
  open(key: string): BottleSession {
    let s = this.#byKey.get(key);
    if (!s) {
      s = new BottleSession(key, this.#rows);
      this.#byKey.set(key, s);
    }
    return s;
  }

  /**
   * The session as the store has it (an issue taken over). A turn this process
   * still watches or starts for the same bottle stays with it.
   */
  fromRow(row: ForgeState): BottleSession {
    const key = issueKey(row.owner, row.repo, row.issueNumber);
    const before = this.#byKey.get(key);
    const s = new BottleSession(key, this.#rows);
    s.slug = row.slug;
    s.agent = row.agentName;
    s.set({ status: row.status, prs: row.prNumber ? [row.prNumber] : [], pending: [] });
    if (before && before.slug === row.slug) s.carryTurn(before);
    else before?.unwatch();
    this.#byKey.set(key, s);
    return s;
  }

  /** Forget the issue's session (its turn's watch stops with it). */
  delete(key: string): void {
    this.#byKey.get(key)?.unwatch();
    this.#byKey.delete(key);
  }

  bySlug(slug: string): BottleSession | undefined {
    if (!slug) return undefined;
    for (const s of this.#byKey.values()) if (s.slug === slug) return s;
    return undefined;
  }

  /** Sessions whose turn is watched. */
  watched(): BottleSession[] {
    return [...this.#byKey.values()].filter((s) => s.monitor);
  }

  /** Whether `slug`'s turn is watched or being started here. */
  busy(slug: string): boolean {
    const s = this.bySlug(slug);
    return !!s && (s.starting || !!s.monitor);
  }

  /** Whether any turn is being started here. */
  anyStarting(): boolean {
    for (const s of this.#byKey.values()) if (s.starting) return true;
    return false;
  }
}
