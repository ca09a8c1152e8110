import type { ServerResponse } from 'node:http';
import type { Step } from '../script';

/** Write `events` as one server-sent-events response and end it. */
export function sse(res: ServerResponse, events: Array<[string | undefined, unknown]>): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  for (const [event, data] of events)
    res.write(
      `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`,
    );
  res.end();
}

/** The usage a scripted answer reports unless its step says otherwise. */
export const DEFAULT_USAGE = { input: 12, output: 7, cacheRead: 0, cacheWrite: 0 };

/** The tokens a step's answer reports (its `usage`, over the defaults). */
export const usageOf = (step: Step) => ({ ...DEFAULT_USAGE, ...step.usage });
