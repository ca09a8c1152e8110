import { MemoryLeaseStore } from './leases';
import { MemoryForgeStateStore } from './memory-store';
import { MemoryFleetRoster } from './roster';
import {
  describeInboxConformance,
  describeLeaseConformance,
  describeLedgerConformance,
  describeRosterConformance,
  describeRoutedInboxConformance,
  describeStoreConformance,
} from './testing';

describeStoreConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
describeLedgerConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
describeInboxConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
describeRoutedInboxConformance('MemoryForgeStateStore', {
  create: () => new MemoryForgeStateStore(),
});

/**
 * The same store behind promises, as a network engine answers: every result
 * arrives later and every refusal is a rejection, never a throw. The suites
 * must hold it to the same behaviour.
 */
function later(store: MemoryForgeStateStore): MemoryForgeStateStore {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        await new Promise((resolve) => setImmediate(resolve));
        return value.apply(target, args);
      };
    },
  });
}
const create = () => later(new MemoryForgeStateStore());
describeStoreConformance('MemoryForgeStateStore behind promises', { create });
describeLedgerConformance('MemoryForgeStateStore behind promises', { create });
describeInboxConformance('MemoryForgeStateStore behind promises', { create });
describeRoutedInboxConformance('MemoryForgeStateStore behind promises', { create });
describeLeaseConformance('MemoryLeaseStore', { create: () => new MemoryLeaseStore() });
describeRosterConformance('MemoryFleetRoster', { create: () => new MemoryFleetRoster() });
