import type { ServerResponse } from 'node:http';

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

const _usage = { input_tokens: 12, output_tokens: 7 };

/** The usage every scripted answer reports. */
export const usage = { input_tokens: 12, output_tokens: 7 };
