/**
 * @module
 * `bb`'s commands as functions, so tests and other programs call them without
 * spawning a process. `bin.ts` is only the error boundary around {@link runCli}.
 */
export { type CliIo, EXIT, runCli } from './cli';
export { demoCommand } from './commands/demo';
export { type DoctorCheck, doctorCommand, runDoctor } from './commands/doctor';
export { orchestrateCommand, type StatusJson } from './commands/orchestrate';
export { provenanceCommand } from './commands/provenance';
export { resumeCommand, startCommand } from './commands/start';
export type { CliDeps } from './deps';
export { UsageError } from './io';
