// The command tables of the README and docs/cli.md are the CLI's own: made from
// COMMANDS (`pnpm --filter @bb/cli docs`), so they cannot drift from `bb --help`.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FORKLIFT_USAGE } from '@bb/forklift';
import { describe, expect, it } from 'vitest';
import { runCli } from './cli';
import { commandTable, TABLE_END, TABLE_START, withTable } from './docs';
import { COMMANDS } from './usage';

const root = join(import.meta.dirname, '..', '..', '..');
const table = commandTable((c) => c.usage ?? FORKLIFT_USAGE);

async function help(argv: string[]): Promise<string> {
  let out = '';
  await runCli(argv, {
    env: {},
    cwd: root,
    stdout: (s) => {
      out += s;
    },
    stderr: () => {},
  });
  return out;
}

describe('the generated command tables', () => {
  for (const file of ['README.md', 'docs/cli.md'])
    it(`${file} has the command table of this build (else: pnpm --filter @bb/cli docs)`, () => {
      const text = readFileSync(join(root, file), 'utf8');
      expect(withTable(text, table, file)).toBe(text);
    });

  it('lists every command bb --help lists, with the synopsis its own --help prints', async () => {
    const top = await help(['--help']);
    for (const c of COMMANDS) {
      expect(top).toContain(`  ${c.name.padEnd(13)} ${c.summary}`);
      expect(table).toContain(c.summary);
      if (c.usage) expect(await help(['help', c.name])).toBe(c.usage);
    }
  });

  it('refuses a file without its markers, naming the file and what to add', () => {
    expect(() => withTable('no table here', table, 'docs/x.md')).toThrow(/docs\/x\.md/);
    expect(() => withTable('no table here', table, 'docs/x.md')).toThrow(TABLE_START);
    expect(withTable(`a\n${TABLE_START}\nold\n${TABLE_END}\nb`, 'T', 'f')).toBe(
      `a\n${TABLE_START}\n\nT\n\n${TABLE_END}\nb`,
    );
  });
});
