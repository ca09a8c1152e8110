import { createHash, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { summarizeEgress } from '@bb/egress';
import { GENESIS, verifyOpLog } from '@bb/forge-sidecar';
import { DEFAULT_PRICES, type PriceTable } from './prices';
import { GENESIS_HASH, RECORD_VERSION, type RunRecord } from './record';
import type { SecretScanner } from './scanner';
import { egressEntries, meteredUsage } from './usage';

export interface BuildInput {
  /** `$BB_HOME/bottles/<slug>`: its `state/ops.jsonl` and optional `state/egress.jsonl`. */
  stateDir: string;
  slug: string;
  agent: string;
  provider?: string;
  providerVersion?: string;
  bottles: string[];
  forge: RunRecord['forge'];
  turn: number;
  sessionRotated?: RunRecord['sessionRotated'];
  /** What was taken out of the text the turn's prompt quotes. */
  promptHidden?: RunRecord['promptHidden'];
  /** The turn's supervise requests and their decisions. */
  supervise?: RunRecord['supervise'];
  startedAt: string;
  finishedAt: string;
  exitCode: number | null;
  /** The turn's failure as the agent's CLI reported it, when it failed. */
  agentError?: string;
  done: RunRecord['done'];
  watchdogFired: RunRecord['watchdogFired'];
  /**
   * What to scan: the commits the run pushed and where their objects are (the
   * sidecar's push repository), and what the launch base and earlier turns covered.
   */
  scan?: { tips: string[]; exclude?: string[]; objectDirs: string[] };
  /** The op log's head as the sidecar relayed it, to protect the log's last line. */
  opLogHead?: { hash: string; seq: number };
  /** The heads earlier records of this bottle verified: the log must still run through them. */
  earlierHeads?: Array<{ hash: string; seq: number }>;
  prev?: string;
  /** What model tokens cost, for the usage section. @default DEFAULT_PRICES */
  prices?: PriceTable;
  scanner: SecretScanner;
  bbVersion: string;
  gitCommit: string | null;
}

/** Build a run record from a bottle's state. A tampered op log is recorded as such, loudly. */
export async function buildRunRecord(input: BuildInput): Promise<RunRecord> {
  const opsFile = join(input.stateDir, 'state', 'ops.jsonl');
  const opsText = existsSync(opsFile) ? readFileSync(opsFile, 'utf8') : '';
  const ops = verifyOpLog(opsText, input.opLogHead, input.earlierHeads ?? []);
  const egressFile = join(input.stateDir, 'state', 'egress.jsonl');
  const egress = existsSync(egressFile)
    ? egressEntries(readFileSync(egressFile, 'utf8'))
    : undefined;
  const usage = egress && meteredUsage(egress, input.startedAt, input.prices ?? DEFAULT_PRICES);
  const scan = await input.scanner.scanCommits(
    input.scan ?? {
      objectDirs: [join(input.stateDir, 'state', 'push.git', 'objects')],
      tips: [],
    },
  );
  return {
    version: RECORD_VERSION,
    id: randomUUID(),
    slug: input.slug,
    agent: input.agent,
    ...(input.provider ? { provider: input.provider } : {}),
    ...(input.providerVersion ? { providerVersion: input.providerVersion } : {}),
    bottles: input.bottles,
    forge: input.forge,
    turn: input.turn,
    ...(input.sessionRotated ? { sessionRotated: input.sessionRotated } : {}),
    ...(input.supervise?.length ? { supervise: input.supervise } : {}),
    ...(input.promptHidden?.length ? { promptHidden: input.promptHidden } : {}),
    startedAt: input.startedAt,
    finishedAt: input.finishedAt,
    durationMs: Math.max(0, Date.parse(input.finishedAt) - Date.parse(input.startedAt)),
    exitCode: input.exitCode,
    ...(input.agentError ? { agentError: input.agentError.slice(0, 2000) } : {}),
    done: input.done,
    watchdogFired: input.watchdogFired,
    secretScan: scan,
    ...(egress ? { egress: summarizeEgress(egress) } : {}),
    ...(usage ? { usage } : {}),
    opLog: {
      verified: ops.ok,
      head: input.opLogHead ?? logHead(opsText),
      problems: ops.problems,
      entries: ops.entries as unknown as Array<Record<string, unknown>>,
    },
    bbVersion: input.bbVersion,
    gitCommit: input.gitCommit,
    prev: input.prev ?? GENESIS_HASH,
  };
}

/** The hash and number of a log's last line (what the next turn must run through). */
function logHead(text: string): { hash: string; seq: number } {
  const lines = text.split('\n').filter((l) => l.length > 0);
  const last = lines.at(-1);
  return {
    hash: last === undefined ? GENESIS : createHash('sha256').update(last).digest('hex'),
    seq: lines.length,
  };
}
