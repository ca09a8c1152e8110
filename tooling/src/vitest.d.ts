import type { ViteUserConfig } from 'vitest/config';
export declare const preset: ViteUserConfig;
export declare function definePackageConfig(extra?: ViteUserConfig): ViteUserConfig;
