#!/usr/bin/env node
// forklift: keep a fork in sync with its upstream (see forklift --help).
import { runForkliftCli } from './cli';

process.exitCode = await runForkliftCli(process.argv.slice(2), {
  cwd: process.cwd(),
  env: process.env,
  stdout: (s) => process.stdout.write(s),
  stderr: (s) => process.stderr.write(s),
});
