import {
  type BottleStorage,
  hostBottleStorage,
  importedCommits,
  type TurnOutcome,
} from '@bb/headless';
import {
  buildRunRecord,
  type PriceTable,
  type RunRecord,
  type RunRecordStore,
  type SecretScanner,
  type SigningKey,
  signRecord,
} from '@bb/provenance';
import type { WatchdogReason } from './machine';
import { clearTurnLog, drainTurn, readTurnLog } from './turn-log';

export interface ProvenanceOptions {
  store: RunRecordStore;
  key: SigningKey;
  scanner: SecretScanner;
  bbVersion: string;
  gitCommit: string | null;
  /** What model tokens cost, for each record's usage. @default DEFAULT_PRICES */
  prices?: PriceTable;
}

export interface RecordTurnOptions {
  slug: string;
  agent: string;
  /** Where BB_HOME is read from (for the host's storage, when `storage` is not given). */
  env: Record<string, string | undefined>;
  /** Where the bottle's state is read from. @default the host's, under `env`'s BB_HOME */
  storage?: BottleStorage | undefined;
  forge: { owner: string; repo: string; issue: number } | null;
  /** PRs known before this turn; the turn's own `open_pr` calls are added. */
  prs: number[];
  outcome: TurnOutcome;
  startedAt: string;
  /** Set when the watchdog (or a restart) ended the turn. */
  fired?: { reason: WatchdogReason; detail: string } | undefined;
  provenance: ProvenanceOptions;
  /**
   * The bottle's supervise requests made during this turn, with their decisions
   * and remediations (`auditTurn` of `@bb/supervise`'s desk).
   */
  supervise?:
    | ((
        slug: string,
        startedAt: string,
      ) => RunRecord['supervise'] | Promise<RunRecord['supervise']>)
    | undefined;
}

export interface RecordedTurn {
  done: { status: 'success' | 'failure' | 'blocked'; summary: string } | null;
  prs: number[];
  record: RunRecord;
}

/**
 * After a turn: fold what the bottle's sidecar relayed (PRs opened, the done
 * signal, the op log's head, the commits it took in to push) from its queue
 * into the turn log, then build, sign and store the turn's provenance record
 * and forget the turn log. An agent that stopped without `signal_done` is
 * recorded with `watchdogFired: exit_without_signal`.
 */
export async function recordTurn(o: RecordTurnOptions): Promise<RecordedTurn> {
  const storage = o.storage ?? hostBottleStorage(o.env);
  const slug = o.slug;
  await drainTurn(storage, slug);
  const log = await readTurnLog(storage, slug);
  const prs = [...new Set([...o.prs, ...log.prs])];
  const pushed = log.pushed;
  // The first done of a turn is the one that counts (the sidecar refuses a second).
  const done: RecordedTurn['done'] = log.done;
  const head = log.head;
  const fired = o.fired ?? log.fired;
  const meta = await storage.meta(slug);
  const p = o.provenance;
  const earlier = (await p.store.chain(o.slug)).map((r) => r.record);
  // A bottle killed before its first turn ended still records turn 1, never 0.
  const turn = Math.max(1, meta?.turns.length ?? 1);
  const last = earlier.at(-1);
  if (last && last.turn === turn && !meta?.current) {
    // This turn was recorded already (a restart between the record and the row):
    // once is the record; the second ask gets the first answer.
    await clearTurnLog(storage, slug);
    return {
      done: last.done,
      prs: [...new Set([...prs, ...(last.forge?.prs ?? [])])],
      record: last,
    };
  }
  const evidence = await storage.evidence(slug);
  const record = await buildRunRecord({
    stateDir: evidence.dir,
    scan: {
      // What left the bottle as commits: every commit the sidecar took in to push
      // (kept in its own repository before the push, checked object by object),
      // and the ids it relayed. The agent's own repository is never read.
      tips: [...new Set([...importedCommits(evidence.pushRepo), ...pushed])],
      // The launch's history is the repository mirror's, which the push repository borrows.
      objectDirs: evidence.objectDirs,
      // The launch base and what earlier turns covered: history is not blamed again.
      exclude: [
        ...(meta?.baseCommit ? [meta.baseCommit] : []),
        ...earlier.flatMap((r) => r.secretScan.covered ?? []),
      ],
    },
    earlierHeads: earlier.flatMap((r) => (r.opLog.head ? [r.opLog.head] : [])),
    slug: o.slug,
    agent: o.agent,
    ...(o.outcome.provider ? { provider: o.outcome.provider } : {}),
    ...(o.outcome.providerVersion ? { providerVersion: o.outcome.providerVersion } : {}),
    bottles: meta?.bottles ?? [],
    forge: o.forge ? { ...o.forge, prs } : null,
    turn,
    ...(log.rotated ? { sessionRotated: log.rotated } : {}),
    ...(log.hidden?.length ? { promptHidden: log.hidden } : {}),
    ...(o.supervise ? { supervise: await o.supervise(o.slug, o.startedAt) } : {}),
    startedAt: o.startedAt,
    finishedAt: new Date().toISOString(),
    exitCode: o.outcome.exitCode,
    ...(!o.outcome.ok && o.outcome.error ? { agentError: o.outcome.error } : {}),
    done,
    watchdogFired:
      fired ??
      (done
        ? null
        : {
            reason: 'exit_without_signal',
            detail: `the agent exited ${o.outcome.exitCode} without signal_done`,
          }),
    ...(head ? { opLogHead: head } : {}),
    prev: await p.store.head(o.slug),
    scanner: p.scanner,
    ...(p.prices ? { prices: p.prices } : {}),
    bbVersion: p.bbVersion,
    gitCommit: p.gitCommit,
  });
  await p.store.append(signRecord(record, p.key));
  await clearTurnLog(storage, slug);
  return { done, prs, record };
}
