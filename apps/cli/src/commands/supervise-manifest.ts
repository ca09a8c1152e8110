import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { type BottleMeta, configDir } from '@bb/headless';
import { createTwoFilesPatch } from 'diff';

/**
 * What persisting an approval to the bottle manifest changes: the bottle's
 * first manifest with its allowlist or credential routes replaced. Shown as a
 * diff; written only when asked (`write`).
 */
export function manifestChange(
  env: Record<string, string | undefined>,
  meta: BottleMeta | undefined,
  kind: 'routes' | 'allowlist',
  final: string,
  write: boolean,
): { file: string; diff: string; written: boolean } {
  if (!meta) throw new BbError('NOT_FOUND', 'the bottle is gone: its manifest cannot be shown');
  const name = meta.bottles[0]!;
  const file = join(configDir(env), 'bottles', `${name}.json`);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    throw new BbError(
      'INVALID_INPUT',
      `the bottle manifest ${name} is not a JSON file at ${file}; change it by hand (the approval is kept for the bottle)`,
    );
  }
  const manifest = JSON.parse(text) as Record<string, unknown>;
  const next = { ...manifest };
  if (kind === 'allowlist')
    next['egress'] = {
      ...(manifest['egress'] as object),
      allow: (JSON.parse(final) as { allow: string[] }).allow,
    };
  else
    next['credentials'] = (
      JSON.parse(final) as {
        routes: Array<{ prefix: string; upstream: string; headers: Record<string, string> }>;
      }
    ).routes.map((r) => ({ route: r.prefix, upstream: r.upstream, headers: r.headers }));
  const after = `${JSON.stringify(next, null, 2)}\n`;
  const diff = createTwoFilesPatch(
    file,
    file,
    text.endsWith('\n') ? text : `${text}\n`,
    after,
    'now',
    'approved',
  );
  if (write) writeFileSync(file, after);
  return { file, diff, written: write };
}
