/**
 * The forge gate's contract, written once: every method an agent may call, its
 * parameters (checked by the sidecar before anything happens), whether it
 * writes, what it is for, and its `bb-forge` command. The sidecar's method
 * table, the client, `bb-forge`, the MCP bridge and the prompt overlay are all
 * made from this.
 */
import type { Comment, Issue, PullRequest, Review, ReviewComment } from '@bb/forge';
import { z } from 'zod';
import type { DoneSignal } from './queue';

const MAX_INT = 2_147_483_647;
const number = z
  .number({ error: 'number must be a number (not a string)' })
  .int('number must be a whole number')
  .positive('number must be positive')
  .max(MAX_INT, 'number is too large')
  .describe('an issue or PR number of this repository');
const body = z
  .string({ error: 'body must be a string' })
  .max(65_535, 'body is longer than 65535 characters');
const DONE_STATUSES = [
  'success',
  'failure',
  'blocked',
] as const satisfies readonly DoneSignal['status'][];

/** How `bb-forge` spells a method: its command, its arguments, and one line of help. */
interface Cli {
  command: string;
  args: string;
  help: string;
}

/** A method answering `R`: `method<R>()({ ... })` (its parameters' type comes from `params`). */
const method =
  <R>() =>
  <P extends z.ZodObject>(m: { params: P; write: boolean; description: string; cli: Cli }) =>
    m as typeof m & { readonly result?: R };

export const METHODS = {
  read_issue: method<Issue>()({
    params: z.object({ number }).strict(),
    write: false,
    description: 'Read an issue (title, body, labels, assignees, state).',
    cli: { command: 'read-issue', args: 'N', help: 'print issue N as JSON' },
  }),
  read_pr: method<PullRequest>()({
    params: z.object({ number }).strict(),
    write: false,
    description: 'Read a pull request (head, base, merge state).',
    cli: { command: 'read-pr', args: 'N', help: 'print PR N as JSON' },
  }),
  read_comments: method<Comment[]>()({
    params: z.object({ number }).strict(),
    write: false,
    description: 'Read the comments of an issue or PR, oldest first.',
    cli: { command: 'comments', args: 'N', help: 'print the comments of issue or PR N' },
  }),
  read_reviews: method<Array<Review & { comments: ReviewComment[] }>>()({
    params: z.object({ number }).strict(),
    write: false,
    description:
      'Read the reviews of a pull request, oldest first: each with its state (approved, changes_requested, commented), its text and its inline comments (file, line, text).',
    cli: {
      command: 'reviews',
      args: 'N',
      help: 'print the reviews of PR N with their inline comments (file, line)',
    },
  }),
  post_comment: method<Comment>()({
    params: z.object({ number, body: body.min(1, 'body must not be empty') }).strict(),
    write: true,
    description: 'Comment on your issue or one of its PRs.',
    cli: {
      command: 'comment',
      args: 'N TEXT|-',
      help: 'comment on issue or PR N (- reads the text from stdin)',
    },
  }),
  update_description: method<{ ok: true }>()({
    params: z.object({ number, body }).strict(),
    write: true,
    description: 'Replace the description of your issue or one of its PRs.',
    cli: {
      command: 'describe',
      args: 'N TEXT|-',
      help: 'replace the description of issue or PR N',
    },
  }),
  open_pr: method<PullRequest>()({
    params: z
      .object({
        title: z
          .string({ error: 'title must be a string' })
          .min(1, 'title must not be empty')
          .max(255),
        body: body.default(''),
        base: z
          .string()
          .regex(/^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$/, 'base must be a branch name')
          .refine((b) => !b.includes('..') && !b.endsWith('.lock'), 'base must be a branch name')
          .optional(),
      })
      .strict(),
    write: true,
    description: 'Push your committed work and open the pull request for your issue.',
    cli: {
      command: 'open-pr',
      args: 'TITLE [BODY|-]',
      help: 'push your branch and open the PR for your issue',
    },
  }),
  push: method<{ sha: string }>()({
    params: z.object({}).strict(),
    write: true,
    description: 'Push new commits to your pull request branch.',
    cli: { command: 'push', args: '', help: 'push new commits to your branch' },
  }),
  signal_done: method<{ ok: true }>()({
    params: z
      .object({
        status: z.enum(DONE_STATUSES, { error: 'status must be success, failure or blocked' }),
        summary: z
          .string({ error: 'summary must be a string' })
          .min(1, 'summary must not be empty')
          .max(4000),
      })
      .strict(),
    write: true,
    description:
      'Say you have finished this unit of work, with a status and a short summary. Then stop.',
    cli: {
      command: 'done',
      args: 'STATUS SUMMARY',
      help: 'signal that you are done (STATUS: success, failure or blocked)',
    },
  }),
};

export type MethodName = keyof typeof METHODS;
export const METHOD_NAMES = Object.keys(METHODS) as MethodName[];
/** What each method takes, as a caller writes it (defaults may be left out). */
export type ParamsOf<M extends MethodName> = z.input<(typeof METHODS)[M]['params']>;
/** What each method answers. */
export type ResultOf<M extends MethodName> = NonNullable<(typeof METHODS)[M]['result']>;

/** The parameters of every method, checked before anything else happens. */
export const PARAMS = Object.fromEntries(METHOD_NAMES.map((m) => [m, METHODS[m].params])) as {
  [M in MethodName]: (typeof METHODS)[M]['params'];
};

/** Methods that change something; after `signal_done` each answers `ALREADY_DONE`. */
export const WRITE_METHODS: ReadonlySet<MethodName> = new Set(
  METHOD_NAMES.filter((m) => METHODS[m].write),
);

export { DONE_STATUSES };
