// The error boundary of `bb`: run the CLI, map anything unexpected to exit 1
// with a one-line message (no stack unless BB_DEBUG=1).
import { errorMessage } from '@bb/errors';
import { runCli } from './cli';

runCli(process.argv.slice(2), {
  env: process.env,
  cwd: process.cwd(),
  stdout: (t) => process.stdout.write(t),
  stderr: (t) => process.stderr.write(t),
}).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`bb: ${errorMessage(err)}\n`);
    if (process.env['BB_DEBUG'] === '1') console.error(err);
    process.exitCode = 1;
  },
);
