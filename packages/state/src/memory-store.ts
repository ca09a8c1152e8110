import { BbError } from '@bb/errors';
import {
  checkDeliveryKey,
  type DeliveryLedger,
  type DeliveryMeta,
  type DeliveryRecord,
} from './delivery-ledger';
import { type ForgeState, parseForgeState, parseForgeStateKey } from './forge-state';
import { compareStateKeys, type ForgeStateStore } from './store';

const keyOf = (owner: string, repo: string, n: number) => `${owner}\u0000${repo}\u0000${n}`;

/**
 * A `ForgeStateStore` and `DeliveryLedger` held in memory: for tests and for
 * embedding where nothing must survive the process. Values are copied on the
 * way in and out, so callers cannot change stored rows by accident.
 */
export class MemoryForgeStateStore implements ForgeStateStore, DeliveryLedger {
  readonly #rows = new Map<string, ForgeState>();
  readonly #deliveries = new Map<string, DeliveryRecord>();

  upsert(state: ForgeState): void {
    const row = parseForgeState(state);
    const key = keyOf(row.owner, row.repo, row.issueNumber);
    const existing = this.#rows.get(key);
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
    return row ? structuredClone(row) : undefined;
  }

  delete(owner: string, repo: string, issueNumber: number): void {
    const k = parseForgeStateKey(owner, repo, issueNumber);
    this.#rows.delete(keyOf(k.owner, k.repo, k.issueNumber));
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
