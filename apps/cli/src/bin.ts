// The error boundary of `bb`: run the CLI, map anything unexpected to exit 1
// with a one-line message (no stack unless BB_DEBUG=1).
import { errorMessage } from '@bb/errors';
import { runCli } from './cli';

// Ctrl-C (or SIGTERM) asks long-running commands (serve, demo --keep) to finish
// cleanly; a second one exits at once.
const interrupted = new Promise<void>((resolve) => {
  let seen = false;
  const on = () => {
    if (seen) process.exit(130);
    seen = true;
    resolve();
  };
  process.on('SIGINT', on);
  process.on('SIGTERM', on);
});

runCli(process.argv.slice(2), {
  env: process.env,
  cwd: process.cwd(),
  stdout: (t) => process.stdout.write(t),
  stderr: (t) => process.stderr.write(t),
  isTTY: process.stderr.isTTY === true,
  interrupted,
}).then(
  (code) => {
    process.exit(code);
  },
  (err: unknown) => {
    process.stderr.write(`bb: ${errorMessage(err)}\n`);
    if (process.env['BB_DEBUG'] === '1') console.error(err);
    process.exit(1);
  },
);
