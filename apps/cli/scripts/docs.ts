// Write the command tables of README.md and docs/cli.md from the CLI's command table.
// `npm test` checks they are current (apps/cli/src/docs.test.ts).
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { FORKLIFT_USAGE } from '@bb/forklift';
import { commandTable, withTable } from '../src/docs';

const root = join(import.meta.dirname, '..', '..', '..');
const table = commandTable((c) => c.usage ?? FORKLIFT_USAGE);
for (const file of ['README.md', 'docs/cli.md']) {
  const path = join(root, file);
  const before = readFileSync(path, 'utf8');
  const after = withTable(before, table, file);
  if (after !== before) writeFileSync(path, after);
  console.log(`${file}: ${after === before ? 'current' : 'written'}`);
}
