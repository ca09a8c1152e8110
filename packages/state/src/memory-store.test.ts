import { MemoryForgeStateStore } from './memory-store';
import { describeLedgerConformance, describeStoreConformance } from './testing';

describeStoreConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
describeLedgerConformance('MemoryForgeStateStore', { create: () => new MemoryForgeStateStore() });
