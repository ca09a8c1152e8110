#!/usr/bin/env node
import { runScriptAgent } from './script-agent';

process.exitCode = await runScriptAgent(process.argv.slice(2), process.env);
