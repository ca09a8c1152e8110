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
  log(entry: Record<string, unknown>): void;
}

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
    const id = createHash('sha256').update(once).digest('hex').slice(0, 16);
    if (this.#said.has(`${key}:${id}`)) return;
    this.#said.add(`${key}:${id}`);
    this.notices.push({ key, at: new Date().toISOString(), message });
    if (this.notices.length > 100) this.notices.splice(0, this.notices.length - 100);
    this.#o.log({ msg: 'cannot launch', key, why: message });
    if (this.#o.comment === false) return;
    const first = await this.#o.inbox.accept(`bb:feedback:${key}:${id}`, {
      issue: null,
      occurredAt: new Date().toISOString(),
      payload: { issue: key, message },
      deliveryId: undefined,
      kind: 'feedback',
      done: true,
    });
    if (!first) return;
    const { owner, repo, issue } = parseIssueKey(key);
    // Literal text, never markup: the message quotes labels, names and errors (I8).
    await this.#o
      .forgeFor(owner, repo)
      .postComment(issue, forMarkdown(message))
      .catch((err) =>
        this.#o.log({ msg: 'could not post feedback', key, error: errorMessage(err) }),
      );
  }

  /** React 👀 to what woke the agent; a forge that cannot is only logged. */
  acknowledge(key: string, target: Ack): void {
    if (this.#o.acknowledge === false) return;
    const { owner, repo } = parseIssueKey(key);
    void this.#o
      .forgeFor(owner, repo)
      .react(target, 'eyes')
      .catch((err) =>
        this.#o.log({ msg: 'could not acknowledge', key, target, error: errorMessage(err) }),
      );
  }
}
