/**
 * @module
 * `bb`'s commands as functions, so tests and other programs call them without
 * spawning a process. `bin.ts` is only the error boundary around {@link runCli}.
 */
export { type CliIo, EXIT, runCli } from './cli';
