// Build the C programs in native/ into dist/bundle, statically linked so each binary
// runs in any Linux bottle image: bb-relay (the bridge's ports) and bb-tunnel (the
// egress proxy's CONNECT tunnels). Without a C compiler, or off Linux, nothing is
// built: bb-bridge then carries its ports itself and the proxy its tunnels, which
// works the same and costs more per byte.
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const programs = ['bb-relay', 'bb-tunnel'];
if (process.platform !== 'linux') {
  console.warn(
    `${programs.join(' and ')} are not built on ${process.platform}: node carries their bytes`,
  );
  process.exit(0);
}
const cc = process.env.CC || 'cc';
for (const name of programs) {
  const out = join(root, 'dist', 'bundle', name);
  mkdirSync(dirname(out), { recursive: true });
  const flags = [
    '-O2',
    '-Wall',
    '-Wextra',
    '-Werror',
    '-o',
    out,
    join(root, 'native', `${name}.c`),
  ];
  for (const extra of [['-static'], []]) {
    const r = spawnSync(cc, [...extra, ...flags], { stdio: ['ignore', 'inherit', 'pipe'] });
    if (r.status === 0) break;
    if (r.error) {
      console.warn(`${name} is not built (${cc}: ${r.error.message}): node carries its bytes`);
      process.exit(0);
    }
    if (extra.length === 0) {
      process.stderr.write(r.stderr);
      process.exit(1);
    }
  }
}
