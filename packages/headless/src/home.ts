import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

/** `$BB_HOME`, defaulting to `~/.bot-bottle` (the same rule as `resolveBbHome` in @bb/state). */
export function bbHome(env: Record<string, string | undefined>): string {
  const h = env['BB_HOME'];
  return resolve(h && h.length > 0 ? h : join(homedir(), '.bot-bottle'));
}
