#!/usr/bin/env node
// bb-gitea-test-server: run the Gitea-compatible test server standalone.
//   bb-gitea-test-server [--port N] [--seed world.json]
// The seed file is a GiteaWorldSeed (users, orgs, repos, labels, issues) and may
// carry "hooks": [{ "url", "secret", "events" }]. Listens on 127.0.0.1 only.
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { GiteaWorldSeed } from './gitea-server/model';
import { createGiteaTestServer } from './gitea-server/server';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '3000' },
    seed: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  process.stdout.write('usage: bb-gitea-test-server [--port N] [--seed world.json]\n');
  process.exit(0);
}
const port = Number(values.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  process.stderr.write(
    `bb-gitea-test-server: --port ${values.port} is not a port number (0-65535)\n`,
  );
  process.exit(2);
}
let seed: { hooks?: Array<{ url: string; secret: string; events?: string[] }> } & Record<
  string,
  unknown
> = {};
if (values.seed) {
  try {
    seed = JSON.parse(readFileSync(values.seed, 'utf8'));
  } catch (err) {
    process.stderr.write(
      `bb-gitea-test-server: cannot read seed ${values.seed}: ${(err as Error).message}\n`,
    );
    process.exit(2);
  }
}
const server = await createGiteaTestServer({
  port,
  world: seed as GiteaWorldSeed,
  hooks: seed.hooks ?? [],
});
process.stdout.write(`gitea test server on ${server.url} (API ${server.apiUrl})\n`);
for (const [token, login] of server.tokens)
  process.stdout.write(`  token for ${login}: ${token}\n`);
const stop = () => void server.close().then(() => process.exit(0));
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
