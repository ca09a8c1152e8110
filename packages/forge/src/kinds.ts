import { giteaKind } from './gitea/kind';
import { githubKind } from './github/kind';
import { type ForgeKind, ForgeKindRegistry } from './kind';

/**
 * The process's forge kinds: those built into `@bb/forge` (the first is the
 * default when `FORGE_KIND` is unset) and any registered since.
 */
export const forgeKinds = new ForgeKindRegistry(giteaKind.name);
forgeKinds.register(giteaKind);
forgeKinds.register(githubKind);
forgeKinds.seal();

/**
 * Make a forge kind known to this process (`FORGE_KIND` may then name it).
 * `replace` lets a kind of the same name made again take the old one's place
 * (never a built-in kind's).
 */
export function registerForgeKind(kind: ForgeKind, options: { replace?: boolean } = {}): void {
  forgeKinds.register(kind, options);
}
