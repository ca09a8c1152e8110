import type { Options } from 'tsup';
export declare function packageBuild(
  entry: Record<string, string>,
  extra?: Partial<Options>,
): Options;
