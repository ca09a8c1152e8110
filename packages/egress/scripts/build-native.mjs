// Build bb-relay (native/bb-relay.c) into dist/bundle, statically linked so the one
// binary runs in any Linux bottle image. Without a C compiler, or off Linux, nothing
// is built: bb-bridge then carries its ports itself, which works the same and costs
// more per request.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist', 'bundle', 'bb-relay');
const source = join(root, 'native', 'bb-relay.c');
if (process.platform !== 'linux') {
  console.warn(`bb-relay is not built on ${process.platform}: bb-bridge carries its ports itself`);
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
      `bb-relay is not built (${cc}: ${r.error.message}): bb-bridge carries its ports itself`,
    );
    process.exit(0);
  }
  if (extra.length === 0) {
    process.stderr.write(r.stderr);
    process.exit(1);
  }
}
