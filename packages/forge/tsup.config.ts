import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig(
  packageBuild(
    {
      index: 'src/index.ts',
      testing: 'src/testing/index.ts',
      'test-server': 'src/test-server.ts',
      'server-bin': 'src/testing/server-bin.ts',
    },
    { external: ['vitest'] },
  ),
);
