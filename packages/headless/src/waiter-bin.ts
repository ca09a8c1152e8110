#!/usr/bin/env node
// bb-waiter: a warm-capable agent container's first process (see runWaiter).
// BB_TURN_COMMANDS: the directory of turn commands; BB_TURN_STATUS: where turn
// ends are said; BB_FIRST_TURN: the turn to wait for first; BB_BRIDGE: bridge
// mappings (`PORT=SOCKET ...`); BB_WAITER_KILL_ALL=1 in a container of its own.
import { parseBridgeArgs } from '@bb/egress/bridge';
import { runWaiter } from './waiter';

const env = process.env;
const first = Number(env['BB_FIRST_TURN']);
if (!env['BB_TURN_COMMANDS'] || !env['BB_TURN_STATUS'] || !Number.isInteger(first) || first < 1) {
  process.stderr.write(
    'bb-waiter: needs BB_TURN_COMMANDS, BB_TURN_STATUS and BB_FIRST_TURN (a turn number)\n',
  );
  process.exit(2);
}
try {
  await runWaiter({
    commands: env['BB_TURN_COMMANDS'],
    status: env['BB_TURN_STATUS'],
    firstTurn: first,
    bridge: parseBridgeArgs((env['BB_BRIDGE'] ?? '').split(' ').filter(Boolean)),
    killAll: env['BB_WAITER_KILL_ALL'] === '1',
  });
} catch (err) {
  process.stderr.write(`bb-waiter: ${(err as Error).message}\n`);
  process.exit(1);
}
