import { MemoryForgeStateStore } from './memory-store';
import {
  describeInboxConformance,
  describeLedgerConformance,
  describeStoreConformance,
} from './testing';

describeStoreConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
describeLedgerConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
describeInboxConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
