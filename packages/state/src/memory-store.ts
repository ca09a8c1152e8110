import { BbError } from '@bb/errors';
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
  routeByPr,
} from './inbox';
import { compareStateKeys, type ForgeStateStore, type HistoryOptions } from './store';

const keyOf = (owner: string, repo: string, n: number) => `${owner}\u0000${repo}\u0000${n}`;

/**
 * A `ForgeStateStore` and `DeliveryLedger` held in memory: for tests and for
 * embedding where nothing must survive the process. Values are copied on the
 * way in and out, so callers cannot change stored rows by accident.
 */
export class MemoryForgeStateStore implements ForgeStateStore, DeliveryLedger, EventInbox {
  readonly #rows = new Map<string, ForgeState>();
  /** Destroyed rows by slug. */
  readonly #history = new Map<string, ForgeState>();
  readonly #deliveries = new Map<string, DeliveryRecord>();
  readonly #inbox = new Map<number, InboxEvent>();
  #nextId = 1;

  upsert(state: ForgeState): void {
    const row = parseForgeState(state);
    const key = keyOf(row.owner, row.repo, row.issueNumber);
    const existing = this.#rows.get(key);
    if (row.status === 'destroyed') {
      const live = existing?.slug === row.slug ? existing : undefined;
      const before = this.#history.get(row.slug);
      this.#history.set(
        row.slug,
        structuredClone({
          ...row,
          createdAt: live?.createdAt ?? before?.createdAt ?? row.createdAt,
        }),
      );
      if (live) this.#rows.delete(key);
      return;
    }
    for (const [k, other] of this.#rows) {
      if (k !== key && other.slug === row.slug) {
        throw new BbError(
          'CONFLICT',
          `slug ${JSON.stringify(row.slug)} already belongs to another issue; choose another slug`,
          { data: { slug: row.slug } },
        );
      }
    }
    this.#rows.set(
      key,
      structuredClone(existing ? { ...row, createdAt: existing.createdAt } : row),
    );
  }

  get(owner: string, repo: string, issueNumber: number): ForgeState | undefined {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    const row = this.#rows.get(keyOf(k.owner, k.repo, k.issueNumber));
    if (row) return structuredClone(row);
    const old = [...this.#history.values()]
      .filter((h) => h.owner === k.owner && h.repo === k.repo && h.issueNumber === k.issueNumber)
      .sort((a, b) => (a.updatedAt < b.updatedAt ? 1 : -1))[0];
    return old ? structuredClone(old) : undefined;
  }

  delete(owner: string, repo: string, issueNumber: number): void {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    this.#rows.delete(keyOf(k.owner, k.repo, k.issueNumber));
    for (const [slug, h] of this.#history)
      if (h.owner === k.owner && h.repo === k.repo && h.issueNumber === k.issueNumber)
        this.#history.delete(slug);
  }

  findByPr(owner: string, repo: string, pr: number): ForgeState | undefined {
    const k = parseForgeStateKey(owner, repo, pr);
    for (const r of this.#rows.values())
      if (r.owner === k.owner && r.repo === k.repo && r.prNumber === k.issueNumber)
        return structuredClone(r);
    return undefined;
  }

  history(options: HistoryOptions = {}): ForgeState[] {
    const { limit, before } = checkHistoryOptions(options);
    return [...this.#history.values()]
      .filter((h) => h.updatedAt < before)
      .sort((a, b) =>
        a.updatedAt < b.updatedAt ? 1 : a.updatedAt > b.updatedAt ? -1 : a.slug < b.slug ? -1 : 1,
      )
      .slice(0, limit)
      .map((h) => structuredClone(h));
  }

  accept(key: string, event: InboxInput): InboxEvent | undefined {
    checkDeliveryKey(key);
    const e = checkInboxInput(event);
    if (!this.recordDelivery(key, { deliveryId: e.deliveryId, event: e.kind })) return undefined;
    const id = this.#nextId++;
    const routed = routeByPr(e, [...this.#rows.values()]);
    this.#inbox.set(id, {
      id,
      key,
      issue: routed.issue,
      state: routed.state,
      occurredAt: e.occurredAt,
      receivedAt: new Date().toISOString(),
      payload: JSON.parse(e.payloadJson),
    });
    return structuredClone(this.#inbox.get(id));
  }

  openEvents(): InboxEvent[] {
    return [...this.#inbox.values()]
      .filter((e) => e.state !== 'done')
      .sort((a, b) =>
        a.occurredAt < b.occurredAt ? -1 : a.occurredAt > b.occurredAt ? 1 : a.id - b.id,
      )
      .map((e) => structuredClone(e));
  }

  openEventsOf(issue: string): InboxEvent[] {
    return this.openEvents().filter((e) => e.issue === issue);
  }

  recentEvents(prefix: string, limit: number): InboxEvent[] {
    checkRecent(prefix, limit);
    return [...this.#inbox.values()]
      .filter((e) => e.key.startsWith(prefix))
      .sort((a, b) => b.id - a.id)
      .slice(0, limit)
      .map((e) => structuredClone(e));
  }

  settle(id: number, state: InboxState, issue?: string | null): void {
    checkSettle(id, state);
    const e = this.#inbox.get(id);
    if (!e) return;
    e.state = state;
    if (issue !== undefined) e.issue = issue;
  }

  pruneInbox(before: Date): number {
    checkDate(before, 'pruneInbox');
    let n = 0;
    for (const [id, e] of this.#inbox)
      if (e.state === 'done' && Date.parse(e.receivedAt) < before.getTime()) {
        this.#inbox.delete(id);
        n++;
      }
    return n;
  }

  all(): ForgeState[] {
    return [...this.#rows.values()].sort(compareStateKeys).map((r) => structuredClone(r));
  }

  recordDelivery(key: string, meta: DeliveryMeta = {}): boolean {
    checkDeliveryKey(key);
    if (this.#deliveries.has(key)) return false;
    this.#deliveries.set(key, {
      key,
      receivedAt: new Date().toISOString(),
      ...(meta.deliveryId === undefined ? {} : { deliveryId: meta.deliveryId }),
      ...(meta.event === undefined ? {} : { event: meta.event }),
    });
    return true;
  }

  getDelivery(key: string): DeliveryRecord | undefined {
    const r = this.#deliveries.get(checkDeliveryKey(key));
    return r ? { ...r } : undefined;
  }

  pruneDeliveries(before: Date): number {
    let n = 0;
    for (const [k, r] of this.#deliveries) {
      if (Date.parse(r.receivedAt) < before.getTime()) {
        this.#deliveries.delete(k);
        n++;
      }
    }
    return n;
  }
}
