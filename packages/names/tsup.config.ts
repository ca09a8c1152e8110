import { packageBuild } from '@bb/tooling/tsup';
import { defineConfig } from 'tsup';

export default defineConfig(packageBuild({ index: 'src/index.ts' }));
