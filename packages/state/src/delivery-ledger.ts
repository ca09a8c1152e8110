import { BbError } from '@bb/errors';
import type { Awaitable } from './store';

/** What the orchestrator remembers about an accepted delivery. */
export interface DeliveryMeta {
  /** The forge's own delivery id (Gitea: `X-Gitea-Delivery`). Replays change it. */
  deliveryId?: string | undefined;
  /** The forge event name, for the operator's eye. */
  event?: string | undefined;
}

export interface DeliveryRecord extends DeliveryMeta {
  key: string;
  receivedAt: string;
}

/**
 * Remembers which webhook changes were already accepted, so a duplicate delivery
 * is acknowledged and not processed twice. Keys are semantic, chosen by the
 * caller (Gitea replays carry a new delivery UUID for the same change).
 */
export interface DeliveryLedger {
  /**
   * Record `key`. Returns `true` when the key is new (the caller should process
   * the event), `false` when it was recorded before. Atomic across processes
   * sharing one database. Throws when the write cannot be made durable
   * (`STATE_BUSY`, `STATE_UNWRITABLE`): the caller must not acknowledge then.
   */
  recordDelivery(key: string, meta?: DeliveryMeta): Awaitable<boolean>;
  /** The record for `key`, or `undefined`. */
  getDelivery(key: string): Awaitable<DeliveryRecord | undefined>;
  /** Delete records received before `before`; returns how many were deleted. */
  pruneDeliveries(before: Date): Awaitable<number>;
}

export function checkDeliveryKey(key: unknown): string {
  if (typeof key !== 'string' || key.length === 0 || key.length > 512) {
    throw new BbError(
      'INVALID_INPUT',
      `invalid delivery key ${JSON.stringify(key)}: must be a string of 1 to 512 characters`,
    );
  }
  return key;
}
