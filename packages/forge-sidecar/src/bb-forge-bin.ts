#!/usr/bin/env node
import { runBbForge } from './bb-forge';

process.exitCode = await runBbForge(process.argv.slice(2), {
  out: (s) => process.stdout.write(s),
  err: (s) => process.stderr.write(s),
});
