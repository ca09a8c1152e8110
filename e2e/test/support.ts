// Helpers shared by the end-to-end tests.
import { existsSync } from 'node:fs';

/** Poll `fn` every 100 ms until it returns something truthy; fail after `ms`. */
export async function until<T>(
  what: string,
  fn: () => T | undefined | Promise<T | undefined>,
  ms = 60_000,
): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Debian's Chromium for browser tests, or why there is none. With
 * BB_REQUIRE_DOCKER=1 (CI) a missing browser is an error, not a skip.
 */
export function probeChromium(path = '/usr/bin/chromium'): { ok: boolean; path: string } {
  if (existsSync(path)) return { ok: true, path };
  if (process.env['BB_REQUIRE_DOCKER'] === '1')
    throw new Error(`BB_REQUIRE_DOCKER=1 but ${path} is missing: run scripts/ensure-chromium.sh`);
  console.warn(`[bb] skipping browser tests: ${path} is missing (scripts/ensure-chromium.sh)`);
  return { ok: false, path };
}
