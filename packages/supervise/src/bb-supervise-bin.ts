#!/usr/bin/env node
// bb-supervise: the supervise tools as a command, for agents without MCP (pi) and shells.
import { runBbSupervise } from './bb-supervise';

process.exitCode = await runBbSupervise(process.argv.slice(2));
