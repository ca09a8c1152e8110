// Build bb-fdpass (native/bb-fdpass.c) into dist/bundle, statically linked so the
// one binary runs in any Linux bottle image. Without a C compiler, or off Linux,
// nothing is built: bottles then bridge their egress port instead of handing its
// connections over, which works the same and costs more per request.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'bundle', 'bb-fdpass');
const source = join(root, 'native', 'bb-fdpass.c');
if (process.platform !== 'linux') {
  console.warn(`bb-fdpass is not built on ${process.platform}: bottles bridge their egress port`);
  process.exit(0);
}
mkdirSync(dirname(out), { recursive: true });
const cc = process.env.CC || 'cc';
const flags = ['-O2', '-Wall', '-Wextra', '-Werror', '-o', out, source];
for (const extra of [['-static'], []]) {
  const r = spawnSync(cc, [...extra, ...flags], { stdio: ['ignore', 'inherit', 'pipe'] });
  if (r.status === 0) process.exit(0);
  if (r.error) {
    console.warn(
      `bb-fdpass is not built (${cc}: ${r.error.message}): bottles bridge their egress port`,
    );
    process.exit(0);
  }
  if (extra.length === 0) {
    process.stderr.write(r.stderr);
    process.exit(1);
  }
}
