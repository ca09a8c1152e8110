import type { Options } from 'tsup';
export declare function packageBuild(
  entry: Record<string, string>,
  extra?: Partial<Options>,
): Options;
export declare function bundleBuild(entry: Record<string, string>): Options;
