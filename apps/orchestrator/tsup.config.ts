import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig(
  packageBuild(
    { index: 'src/index.ts', main: 'src/main.ts' },
    { banner: { js: '#!/usr/bin/env node' } },
  ),
);
