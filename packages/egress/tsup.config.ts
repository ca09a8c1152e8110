import { bundleBuild, packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig([
  packageBuild({ index: 'src/index.ts', bridge: 'src/bridge.ts' }),
  // The proxies beside a bottle, the bridge inside it.
  bundleBuild({ 'bb-egress': 'src/proxies-bin.ts', 'bb-bridge': 'src/bridge-bin.ts' }),
]);
