import type { CliIo } from './io';

/** A CLI's streams captured for a test: what it wrote to each, and the `io` to run it with. */
export function captureIo(
  env: Record<string, string | undefined> = {},
  cwd = '/',
): { readonly out: string; readonly err: string; io: CliIo } {
  const out: string[] = [];
  const err: string[] = [];
  return {
    get out() {
      return out.join('');
    },
    get err() {
      return err.join('');
    },
    io: { env, cwd, stdout: (t: string) => out.push(t), stderr: (t: string) => err.push(t) },
  };
}
