import { giteaKind } from './gitea/kind';
import { type ForgeKind, ForgeKindRegistry } from './kind';

/**
 * The process's forge kinds: those built into `@bb/forge` (the first is the
 * default when `FORGE_KIND` is unset) and any registered since.
 */
export const forgeKinds = new ForgeKindRegistry(giteaKind.name);
forgeKinds.register(giteaKind);

/** Make a forge kind known to this process (`FORGE_KIND` may then name it). */
export function registerForgeKind(kind: ForgeKind): void {
  forgeKinds.register(kind);
}
