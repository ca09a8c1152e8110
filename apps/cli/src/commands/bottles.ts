// bb destroy and bb gc: remove bottles by hand, or every frozen one nobody touched for a while.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { type BottleMeta, destroy, readMeta } from '@bb/headless';
import { NAME_PATTERN } from '@bb/names';
import { parseDuration } from '@bb/service';
import type { ForgeState } from '@bb/state';
import { type CliDeps, type CliState, makeBackend, openState } from '../deps';
import { backendName, type CliIo, parse, UsageError } from '../io';
import { DESTROY_USAGE, GC_USAGE } from '../usage';

const SLUG = NAME_PATTERN;

/** Mark a managed bottle's row destroyed (a running orchestrator reads it on its next event). */
async function markDestroyed(store: CliState['store'], row: ForgeState): Promise<void> {
  await store.upsert({ ...row, status: 'destroyed', updatedAt: new Date().toISOString() });
}

export async function destroyCommand(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { values, positionals } = parse(
    argv,
    { force: { type: 'boolean' }, backend: { type: 'string' } },
    DESTROY_USAGE,
  );
  const [slug, extra] = positionals;
  if (!slug) throw new UsageError('name the bottle to destroy: bb destroy <slug>', DESTROY_USAGE);
  if (extra !== undefined)
    throw new UsageError(`one bottle at a time (got ${JSON.stringify(extra)} too)`, DESTROY_USAGE);
  // A slug names a directory under $BB_HOME/bottles: nothing with a path in it is one.
  if (!SLUG.test(slug))
    throw new UsageError(
      `${JSON.stringify(slug)} is not a bottle slug (lowercase letters, digits, '.', '_', '-')`,
      DESTROY_USAGE,
    );
  const state = await openState(io);
  try {
    const row = (await state.store.all()).find((r) => r.slug === slug);
    const meta = readMeta(slug, io.env);
    if (!row && !meta)
      throw new BbError(
        'NOT_FOUND',
        `no bottle ${slug}: see bb orchestrate status for the managed ones, or ${join(state.home, 'bottles')}`,
      );
    const status = row?.status ?? meta?.status;
    if (status === 'running' && !values['force'])
      throw new BbError(
        'CONFLICT',
        `bottle ${slug} is running: its agent is at work. Add --force to stop it and destroy it anyway (the turn is not recorded)`,
      );
    const backend = makeBackend(
      io,
      backendName(
        values['backend'] ?? (meta?.backend === 'local' ? 'local' : undefined),
        DESTROY_USAGE,
      ),
      deps,
    );
    await destroy(slug, { backend, env: io.env });
    if (row) await markDestroyed(state.store, row);
    io.stdout(`destroyed ${slug}${row ? ` (${row.owner}/${row.repo}#${row.issueNumber})` : ''}\n`);
    return 0;
  } finally {
    await state.close();
  }
}

/** When a bottle last did anything: its last turn's end, or its row's last change. */
function lastActive(row: ForgeState | undefined, meta: BottleMeta | undefined): number {
  const times = [row?.updatedAt, meta?.turns.at(-1)?.finishedAt, meta?.createdAt].map((t) =>
    t ? Date.parse(t) : Number.NaN,
  );
  const known = times.filter((t) => Number.isFinite(t));
  return known.length ? Math.max(...known) : 0;
}

export async function gcCommand(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { values } = parse(
    argv,
    {
      'older-than': { type: 'string' },
      'dry-run': { type: 'boolean' },
      backend: { type: 'string' },
    },
    GC_USAGE,
    { positionals: 0 },
  );
  const raw = (values['older-than'] as string | undefined) ?? '30d';
  const age = parseDuration(raw);
  if (age === undefined || age <= 0)
    throw new UsageError(
      `--older-than needs a duration with a unit such as 14d, 12h or 30m (got ${JSON.stringify(raw)})`,
      GC_USAGE,
    );
  const cutoff = Date.now() - age;
  const state = await openState(io);
  try {
    const rows = new Map((await state.store.all()).map((r) => [r.slug, r]));
    const dir = join(state.home, 'bottles');
    const slugs = new Set([...rows.keys(), ...(existsSync(dir) ? readdirSync(dir) : [])]);
    const doomed: Array<{ slug: string; row?: ForgeState; meta?: BottleMeta }> = [];
    for (const slug of [...slugs].sort()) {
      if (!SLUG.test(slug)) continue;
      const row = rows.get(slug);
      const meta = readMeta(slug, io.env);
      // Only frozen bottles: a running one is at work, a destroyed one is gone.
      if ((row?.status ?? meta?.status) !== 'frozen') continue;
      if (lastActive(row, meta) >= cutoff) continue;
      doomed.push({ slug, ...(row ? { row } : {}), ...(meta ? { meta } : {}) });
    }
    if (doomed.length === 0) {
      io.stdout(`no frozen bottle has been idle for ${raw}\n`);
      return 0;
    }
    const backend = values['dry-run']
      ? undefined
      : makeBackend(io, backendName(values['backend'], GC_USAGE), deps);
    for (const d of doomed) {
      const what = `${d.slug}${d.row ? ` (${d.row.owner}/${d.row.repo}#${d.row.issueNumber}${d.row.prNumber ? `, PR #${d.row.prNumber}` : ', no PR'})` : ''}, idle since ${new Date(lastActive(d.row, d.meta)).toISOString()}`;
      if (!backend) {
        io.stdout(`would destroy ${what}\n`);
        continue;
      }
      await destroy(d.slug, { backend, env: io.env });
      if (d.row) await markDestroyed(state.store, d.row);
      io.stdout(`destroyed ${what}\n`);
    }
    return 0;
  } finally {
    await state.close();
  }
}
