// Helpers shared by the end-to-end tests.

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
