#!/usr/bin/env node
// bb-waiter: a warm-capable agent container's first process (see runWaiter).
// BB_TURN_COMMANDS: the directory of turn commands; BB_TURN_STATUS: where turn
// ends are said; BB_FIRST_TURN: the turn to wait for first, or BB_AFTER_TURN and
// BB_AFTER_CODE: the turn the container's command just ran, and how it ended;
// BB_BRIDGE: bridge mappings (`PORT=SOCKET ...`); BB_WAITER_KILL_ALL=1 in a
// container of its own.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseBridgeArgs } from '@bb/egress/bridge';
import { runWaiter } from './waiter';

// bb-relay sits beside it in the bottle's runtime directory.
const relay = fileURLToPath(new URL('./bb-relay', import.meta.url));

const env = process.env;
// After the container's own turn (BB_AFTER_TURN, its exit code BB_AFTER_CODE), or from BB_FIRST_TURN.
const after = Number(env['BB_AFTER_TURN']);
const first = env['BB_AFTER_TURN'] ? after + 1 : Number(env['BB_FIRST_TURN']);
if (!env['BB_TURN_COMMANDS'] || !env['BB_TURN_STATUS'] || !Number.isInteger(first) || first < 1) {
  process.stderr.write(
    'bb-waiter: needs BB_TURN_COMMANDS, BB_TURN_STATUS and BB_FIRST_TURN or BB_AFTER_TURN (a turn number)\n',
  );
  process.exit(2);
}
const code = Number(env['BB_AFTER_CODE'] ?? 1);
try {
  await runWaiter({
    commands: env['BB_TURN_COMMANDS'],
    status: env['BB_TURN_STATUS'],
    firstTurn: first,
    ...(env['BB_AFTER_TURN']
      ? {
          after: {
            turn: after,
            code: Number.isInteger(code) ? code : 1,
            nonce: env['BB_TURN_NONCE'] ?? 'none',
          },
        }
      : {}),
    bridge: parseBridgeArgs((env['BB_BRIDGE'] ?? '').split(' ').filter(Boolean)),
    bridgeRelay: existsSync(relay) ? relay : undefined,
    killAll: env['BB_WAITER_KILL_ALL'] === '1',
  });
} catch (err) {
  process.stderr.write(`bb-waiter: ${(err as Error).message}\n`);
  process.exit(1);
}
