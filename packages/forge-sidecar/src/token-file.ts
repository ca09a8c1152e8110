/**
 * A forge that follows its token file. The host may put a new token in the file while
 * the sidecar runs (a GitHub App's tokens last an hour, and the host renews them); each
 * call looks at the file (one stat) and, when it was replaced by a non-empty one, the
 * forge is made again with the new token. A file that is gone (the host removes a token
 * that never expires once it is read) leaves the token as it was.
 */
import { readFileSync, statSync } from 'node:fs';
import { registerSecret } from '@bb/errors';
import type { Forge } from '@bb/forge';

function fileKey(file: string): string | undefined {
  try {
    const st = statSync(file);
    return `${st.ino}:${st.mtimeMs}:${st.size}`;
  } catch {
    return undefined;
  }
}

/** A secret in every form the forge's git header makes of it (base64, a signature). */
function registerForgeSecrets(forge: Forge, token: string): void {
  registerSecret(token);
  for (const v of Object.values(forge.gitRemote()?.headers ?? {})) registerSecret(v);
}

export function forgeFollowingTokenFile(
  make: (token: string) => Forge,
  file: string,
  first: string,
  onRenewed?: () => void,
): Forge {
  let token = first;
  let current = make(first);
  registerForgeSecrets(current, first);
  let seen = fileKey(file);
  const follow = () => {
    const key = fileKey(file);
    if (key === undefined || key === seen) return;
    seen = key;
    let next: string;
    try {
      next = readFileSync(file, 'utf8').trim();
    } catch {
      return;
    }
    if (!next || next === token) return;
    const made = make(next);
    registerForgeSecrets(made, next);
    token = next;
    current = made;
    onRenewed?.();
  };
  // Every property is the current forge's, so a ScopedForge around it never holds an old one.
  return new Proxy(current, {
    get(_target, key) {
      follow();
      const v = Reflect.get(current, key, current) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(current) : v;
    },
  });
}
