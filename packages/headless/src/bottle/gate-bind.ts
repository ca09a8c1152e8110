/**
 * A pooled bottle's gate (`pool.ts`) starts before anyone knows which issue it
 * will serve: its process is up, its code loaded, with no forge settings and no
 * token. It waits here for the host's bind file (`BB_GATE_BIND`, in its secrets
 * folder: a tmpfs mounted into the gate alone, out of the agent's reach), whose
 * variables are the gate's real configuration, then starts its surfaces as any
 * gate does.
 */
import { readFileSync } from 'node:fs';
import { BbError } from '@bb/errors';
import { untilFile } from './until-file';

/** The bind file's name in the gate's secrets folder. */
export const BIND_FILE = 'bind.json';

const NAME = /^[A-Z][A-Z0-9_]{0,127}$/;

/** The variables of a bind file's text, or why it is not one. */
export function parseBind(text: string): Record<string, string> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    throw new BbError('INVALID_INPUT', `the bind file is not JSON: ${(err as Error).message}`);
  }
  if (!v || typeof v !== 'object' || Array.isArray(v))
    throw new BbError('INVALID_INPUT', 'the bind file must map variable names to strings');
  const out: Record<string, string> = {};
  for (const [k, value] of Object.entries(v)) {
    if (!NAME.test(k) || typeof value !== 'string')
      throw new BbError(
        'INVALID_INPUT',
        `the bind file's ${JSON.stringify(k)} must be an upper-case variable name with a string value`,
      );
    // The bind itself is not bound again.
    if (k !== 'BB_GATE_BIND') out[k] = value;
  }
  return out;
}

/**
 * With `BB_GATE_BIND`, wait (as long as it takes: an unused pooled bottle is
 * removed by its host) for that file and return the environment it gives;
 * without, `env` as it is.
 */
export async function awaitBind(
  env: Record<string, string | undefined>,
): Promise<Record<string, string | undefined>> {
  const file = env['BB_GATE_BIND'];
  if (!file) return env;
  // An idle pooled gate looks once a second where the filesystem says nothing.
  await untilFile(file, 1000);
  const bound = parseBind(readFileSync(file, 'utf8'));
  const { BB_GATE_BIND: _, ...rest } = env;
  return { ...rest, ...bound };
}
