import { definePackageConfig } from '@bb/tooling/vitest';

export default definePackageConfig();
