import { describeForgeConformance } from './conformance';
import { memoryWorld } from './memory-forge.test-world';

describeForgeConformance('MemoryForge', { create: memoryWorld });
