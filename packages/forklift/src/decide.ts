/**
 * What a run can decide before it merges anything: nothing to do (upstream is in the
 * fork, or the open sync PR already proposes it), or nothing changed since a run that
 * left the fork behind. Nothing is pushed, opened or run in those cases.
 */
import type { Forge } from '@bb/forge';
import { findTrouble } from './notify';
import { OUTCOMES, type Outcome } from './outcomes';
import {
  findSyncPrs,
  ownHead,
  readState,
  type SyncPrs,
  type SyncState,
  TROUBLE,
} from './sync-state';
import { short } from './verify-repo';

export interface DecideInput {
  forge: Forge;
  branch: string;
  sync: string;
  upstream: string;
  published: string;
  forkMd: string;
  stateFile: string;
  notify: boolean;
  force: boolean;
  ancestor: (a: string, b: string) => Promise<boolean>;
  /** Fetch the sync branch; its commit, or undefined when it is not there. */
  fetchSync: () => Promise<string | undefined>;
  warn: (line: string) => void;
}

export type Decision =
  | {
      outcome: Outcome;
      exitCode: number;
      detail: string;
      pr?: { number: number; url: string; branch: string };
      merged?: string;
    }
  | { prs: SyncPrs; state: SyncState | undefined };

export async function decide(o: DecideInput): Promise<Decision> {
  const { forge, branch, sync, upstream, published, forkMd, stateFile, notify } = o;
  if (await o.ancestor(upstream, published)) {
    const { open } = await findSyncPrs(o.forge, o.sync, o.branch, o.warn);
    if (open) {
      await forge.postComment(
        open.number,
        `Upstream \`${short(upstream)}\` is in \`${branch}\` already: this sync PR is not needed any more.`,
      );
      await forge.closeIssue(open.number);
    }
    return {
      outcome: 'nothing-to-do',
      exitCode: OUTCOMES['nothing-to-do'],
      detail: `${branch} already holds every upstream commit (${short(upstream)})${open ? `; the sync PR #${open.number} was closed` : ''}`,
    };
  }
  const prs = await findSyncPrs(o.forge, o.sync, o.branch, o.warn);
  const state = readState(stateFile);
  if (prs.open && !o.force) {
    const proposed = await o.fetchSync();
    // What is there must be forklift's own push: anyone else's commit proves nothing.
    if (proposed && proposed === ownHead(state, prs.open) && (await o.ancestor(upstream, proposed)))
      return {
        outcome: 'nothing-to-do',
        exitCode: OUTCOMES['nothing-to-do'],
        pr: { number: prs.open.number, url: prs.open.url, branch: sync },
        merged: proposed,
        detail: `PR #${prs.open.number} already proposes upstream ${short(upstream)}${(await o.ancestor(published, proposed)) ? '' : `; ${branch} moved since it was made (forklift --force remakes it on ${branch})`}`,
      };
  }
  if (!o.force) {
    // What the last run that left the fork behind saw: kept here, or on the fork's issue.
    const last =
      state ??
      (notify
        ? await findTrouble(forge, branch).then(
            (t) =>
              t?.upstream && {
                upstream: t.upstream,
                forkMd: t.forkMd ?? '',
                outcome: 'stuck',
                at: '',
              },
            () => undefined,
          )
        : undefined);
    if (
      last &&
      (TROUBLE as readonly string[]).includes(last.outcome) &&
      last.upstream === upstream &&
      last.forkMd === forkMd
    )
      return {
        outcome: 'unchanged',
        exitCode: OUTCOMES.unchanged,
        detail: `upstream (${short(upstream)}) and FORK.md are as the ${last.outcome} run${last.at ? ` of ${last.at}` : ''} saw them: not tried again (forklift --force tries)`,
      };
  }

  return { prs, state };
}
