/** The PATH a child process gets when this process has none. */
export const SAFE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * A minimal environment for a child process on the host side of the wall: this
 * process's PATH (or a standard one) and the C locale, plus `extra`. Never the
 * rest of the orchestrator's environment, which holds its token, webhook
 * secret and keys.
 */
export function minimalEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env['PATH'] || SAFE_PATH,
    LANG: 'C',
    LC_ALL: 'C',
  };
  for (const [k, v] of Object.entries(extra)) if (v !== undefined) env[k] = v;
  return env;
}
