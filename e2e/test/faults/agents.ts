// The script agents the fault scenarios run.
import { prSteps, scriptAgent } from '../support';

const answer = {
  steps: [
    { do: 'comment', body: 'Turn {{turn}} was asked: {{prompt}}' },
    { do: 'done', status: 'success', summary: 'Answered.' },
  ],
};

/** Comments "Starting.", works for `sleepMs`, then commits, opens a PR and signals done. */
export const worker = (sleepMs: number) =>
  scriptAgent([
    {
      steps: [
        { do: 'read_issue' },
        { do: 'comment', body: 'Starting.' },
        { do: 'sleep', ms: sleepMs },
        ...prSteps({
          path: 'fix.txt',
          content: 'fixed\n',
          message: 'Fix',
          title: 'Fix it',
          body: 'Done.',
        }),
        { do: 'comment', body: 'PR is up.' },
        { do: 'done', status: 'success', summary: 'Opened the PR.' },
      ],
    },
    answer,
  ]);

/** Opens its PR first, then works for `sleepMs` before it signals done. */
export const opener = (sleepMs: number) =>
  scriptAgent([
    {
      steps: [
        { do: 'read_issue' },
        ...prSteps({
          path: 'fix.txt',
          content: 'fixed\n',
          message: 'Fix',
          title: 'Fix it',
          body: 'Done.',
        }),
        { do: 'comment', body: 'Starting.' },
        { do: 'sleep', ms: sleepMs },
        { do: 'done', status: 'success', summary: 'Opened the PR early.' },
      ],
    },
    answer,
  ]);
