import { createHash } from 'node:crypto';
import { errorMessage } from '@bb/errors';
import type { Forge } from '@bb/forge';
import type { EventInbox } from '@bb/state';
import { forMarkdown } from '@bb/wall';
import type { Notice } from './core';
import type { Ack } from './decide';
import { parseIssueKey } from './routing';

export interface FeedbackOptions {
  inbox: EventInbox;
  forgeFor(owner: string, repo: string): Forge;
  /** Comment on the issue (`false`: notices and the log only). @default true */
  comment?: boolean;
  /** React 👀 to what woke an agent. @default true */
  acknowledge?: boolean;
  /** Say on the thread how a turn ended when it ended without `signal_done`. @default true */
  turnOutcomes?: boolean;
  /** Waits before a comment the forge failed is posted again; after the last it is given up. */
  retryMs?: number[];
  /**
   * Asked just before each forge write about an issue: `false` (the issue is
   * another orchestrator's now) and nothing is written. @default always
   */
  mayWrite?: (key: string) => Promise<boolean>;
  /** Run `fn` after `ms` (unless the orchestrator is closed by then). */
  later?: (ms: number, fn: () => void | Promise<void>) => void;
  log(entry: Record<string, unknown>): void;
}

/** What a comment is about, for the log: a launch that cannot run, or a turn's end. */
type Topic = 'cannot launch' | 'turn outcome';

const idOf = (once: string) => createHash('sha256').update(once).digest('hex').slice(0, 16);

/**
 * What the people on an issue are told: why a targeted issue does not run
 * (once per issue and message, kept across restarts in the delivery ledger),
 * and a 👀 on the comment or review that woke an agent.
 */
export class Feedback {
  /** The latest notices (newest last, at most 100). */
  readonly notices: Notice[] = [];
  /** Notices given in this process (the ledger keeps them across restarts). */
  readonly #said = new Set<string>();
  readonly #o: FeedbackOptions;

  constructor(options: FeedbackOptions) {
    this.#o = options;
  }

  /**
   * Tell the person who asked, once per issue and message, why nothing runs: a
   * short comment on the issue (never provenance), and a notice for status and
   * the dashboard. Once is kept in the delivery ledger (`bb:feedback:…` events,
   * which `bb orchestrate status` lists), so a restart or a replayed webhook
   * does not say it again.
   */
  async say(key: string, message: string, once = message): Promise<void> {
    if (!this.#first(key, once, message, 'cannot launch')) return;
    if (this.#o.comment === false) return;
    // Asked before the ledger notes it: one that lost the issue leaves it to the new holder.
    if (!(await this.#mayWrite(key, 'cannot launch'))) return;
    if (!(await this.#ledger(key, once, message))) return;
    await this.#post(key, parseIssueKey(key).issue, message, 'cannot launch', 0);
  }

  /**
   * Say on the thread (`on`: the issue or its PR) how a turn ended, once per `once`
   * (the turn) across restarts and replays. The comment is posted in the background:
   * a forge that fails it has it tried again, then given up with a log line, and the
   * issue's work goes on meanwhile.
   */
  async turnOutcome(key: string, on: number, message: string, once: string): Promise<void> {
    if (!this.#first(key, once, message, 'turn outcome')) return;
    if (this.#o.turnOutcomes === false) return;
    if (!(await this.#mayWrite(key, 'turn outcome'))) return;
    if (!(await this.#ledger(key, once, message))) return;
    void this.#post(key, on, message, 'turn outcome', 0);
  }

  /** Whether `once` is new to this process; a notice and a log line when it is. */
  #first(key: string, once: string, message: string, topic: Topic): boolean {
    const id = `${key}:${idOf(once)}`;
    if (this.#said.has(id)) return false;
    this.#said.add(id);
    this.notices.push({ key, at: new Date().toISOString(), message });
    if (this.notices.length > 100) this.notices.splice(0, this.notices.length - 100);
    this.#o.log({ msg: topic, key, why: message });
    return true;
  }

  /** Whether `once` is new to the delivery ledger (kept across restarts): it is noted there. */
  async #ledger(key: string, once: string, message: string): Promise<boolean> {
    return !!(await this.#o.inbox.accept(`bb:feedback:${key}:${idOf(once)}`, {
      issue: null,
      occurredAt: new Date().toISOString(),
      payload: { issue: key, message },
      deliveryId: undefined,
      kind: 'feedback',
      done: true,
    }));
  }

  async #post(key: string, on: number, message: string, topic: Topic, attempt: number) {
    const { owner, repo } = parseIssueKey(key);
    try {
      if (!(await this.#mayWrite(key, topic))) return;
      // Literal text, never markup: the message quotes labels, names and errors (I8).
      await this.#o.forgeFor(owner, repo).postComment(on, forMarkdown(message));
    } catch (err) {
      const wait = this.#o.later ? this.#o.retryMs?.[attempt] : undefined;
      this.#o.log({
        msg:
          wait === undefined
            ? `could not post: ${topic}; giving up`
            : `could not post: ${topic}; will retry`,
        key,
        error: errorMessage(err),
        ...(wait === undefined ? {} : { retryInMs: wait }),
      });
      if (wait !== undefined)
        this.#o.later!(wait, () => this.#post(key, on, message, topic, attempt + 1));
    }
  }

  /** React 👀 to what woke the agent; a forge that cannot is only logged. */
  acknowledge(key: string, target: Ack): void {
    if (this.#o.acknowledge === false) return;
    const { owner, repo } = parseIssueKey(key);
    void (async () => {
      if (await this.#mayWrite(key, 'acknowledgement'))
        await this.#o.forgeFor(owner, repo).react(target, 'eyes');
    })().catch((err) =>
      this.#o.log({ msg: 'could not acknowledge', key, target, error: errorMessage(err) }),
    );
  }

  /** Whether the issue is still this orchestrator's to write about (logged when not). */
  async #mayWrite(key: string, what: string): Promise<boolean> {
    if (!this.#o.mayWrite || (await this.#o.mayWrite(key))) return true;
    this.#o.log({ msg: `not posted: ${what}; another orchestrator holds the issue`, key });
    return false;
  }
}
