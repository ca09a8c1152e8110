import { BbError } from '@bb/errors';
import type { BottleRunner, BottleStorage } from '@bb/headless';
import type { ForgeState, ForgeStateStore } from '@bb/state';
import type { RowWriter } from './session';
import { readTurnLog } from './turn-log';

export interface BottleRow {
  owner: string;
  repo: string;
  issue: number;
  slug: string;
  agent: string;
  backendName: string;
  /** The forge user the agent acts as. */
  botLogin: string;
  prNumber: number | null;
  status: ForgeState['status'];
  /** The sidecar's last check-in, when known. @default now */
  lastCheckinAt?: string | undefined;
}

/**
 * Write a bottle's state row: what the caller knows, plus what the bottle's
 * `meta.json` says (bottles, session, working directory), keeping the row's
 * creation time. The one place a row is built, for the orchestrator and `bb`.
 */
export async function saveBottleRow(
  store: ForgeStateStore,
  row: BottleRow,
  /** Where the bottle's meta is read. */
  storage: BottleStorage,
): Promise<void> {
  const now = new Date().toISOString();
  const existing = await store.get(row.owner, row.repo, row.issue);
  const meta = await storage.meta(row.slug);
  await store.upsert({
    owner: row.owner,
    repo: row.repo,
    issueNumber: row.issue,
    slug: row.slug,
    agentName: row.agent,
    bottleNames: meta?.bottles ?? existing?.bottleNames ?? [],
    backendName: row.backendName,
    agentGitUser: row.botLogin,
    prNumber: row.prNumber,
    status: row.status,
    lastCheckinAt: row.lastCheckinAt ?? now,
    sessionId: meta?.sessionId ?? existing?.sessionId ?? null,
    cwd: meta?.cwd ?? existing?.cwd ?? null,
    createdAt: existing?.createdAt ?? now,
    updatedAt: now,
  });
}

/**
 * How the orchestrator's sessions write their rows: only while this process
 * holds the issue (one that stalled past its lease, and may have lost it, asks
 * again first and writes nothing if it did). A row not written is a `CONFLICT`:
 * whatever was to follow it (a destroy, a resume) does not happen either.
 */
export function sessionRows(
  o: { store: ForgeStateStore; runner: BottleRunner; botLogin: string },
  stillHolds: (key: string) => Promise<boolean>,
  log: (entry: Record<string, unknown>) => void,
): RowWriter {
  return {
    async write(s, status) {
      if (!(await stillHolds(s.key))) {
        log({
          msg: 'row not written: another orchestrator holds the issue',
          key: s.key,
          slug: s.slug,
          status,
        });
        throw new BbError(
          'CONFLICT',
          `issue ${s.key} is another orchestrator's now: its row was not written, and what was to follow stops`,
        );
      }
      await saveBottleRow(
        o.store,
        {
          owner: s.owner,
          repo: s.repo,
          issue: s.issue,
          slug: s.slug,
          agent: s.agent,
          backendName: o.runner.backendName,
          botLogin: o.botLogin,
          prNumber: s.state.prs.at(-1) ?? null,
          status,
          lastCheckinAt: (await readTurnLog(o.runner.storage, s.slug)).lastCheckinAt,
        },
        o.runner.storage,
      );
    },
  };
}
