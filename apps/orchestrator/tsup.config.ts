import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig(
  packageBuild({ main: 'src/main.ts' }, { banner: { js: '#!/usr/bin/env node' } }),
);
