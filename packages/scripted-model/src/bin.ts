// bb-scripted-model SCRIPT.json [--port N]: serve a script until Ctrl-C; prints the URL.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { createScriptedModelServer } from './server';

try {
  const { values, positionals } = parseArgs({
    options: { port: { type: 'string' } },
    allowPositionals: true,
  });
  if (positionals.length !== 1) throw new Error('usage: bb-scripted-model SCRIPT.json [--port N]');
  const script = JSON.parse(readFileSync(positionals[0]!, 'utf8')) as { steps?: unknown };
  const server = await createScriptedModelServer({
    script: (Array.isArray(script) ? script : script.steps) as never,
    port: values.port ? Number(values.port) : 0,
  });
  process.stdout.write(`${server.url}\n`);
  const stop = () => void server.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
} catch (err) {
  process.stderr.write(`bb-scripted-model: ${(err as Error).message}\n`);
  process.exit(2);
}
