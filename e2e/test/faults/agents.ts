// The script agents the fault scenarios run.
import { prTurn, scriptAgent } from '../support';

const answer = {
  steps: [
    { do: 'comment', body: 'Turn {{turn}} was asked: {{prompt}}' },
    { do: 'done', status: 'success', summary: 'Answered.' },
  ],
};

/** Says "Starting." on the issue, then works for `ms`. */
const starting = (ms: number) => [
  { do: 'comment', body: 'Starting.' },
  { do: 'sleep', ms },
];

/** Comments "Starting.", works for `sleepMs`, then commits, opens a PR and signals done. */
export const worker = (sleepMs: number) =>
  scriptAgent([prTurn({ before: starting(sleepMs) }), answer]);

/** Opens its PR first, then works for `sleepMs` before it signals done. */
export const opener = (sleepMs: number) =>
  scriptAgent([
    prTurn({
      after: starting(sleepMs),
      comment: null,
      summary: 'Opened the PR early.',
    }),
    answer,
  ]);
