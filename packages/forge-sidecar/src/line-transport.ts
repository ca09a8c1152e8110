import type { Socket } from 'node:net';

/** What a connection's lines are answered with. */
export interface LineServing {
  /** The largest line (one request or batch) accepted; a longer one ends the connection. */
  maxLineBytes: number;
  /** The answer to one parsed line: a response, a batch of them, or none (notifications). */
  answer(payload: unknown): Promise<unknown | null>;
  /** The answer to a line that is not JSON. */
  parseError(): unknown;
  /** The answer to a line over `maxLineBytes` (sent before the connection ends). */
  tooLarge(): unknown;
  /** Each line's work, so a closing sidecar can wait for it. */
  track(work: Promise<unknown>): void;
}

/** A line held unfinished this long ends its connection (a slow or vanished client). */
const PARTIAL_LINE_MS = 10_000;
/** Lines a connection may have in flight; more wait (the socket is paused). */
const MAX_IN_FLIGHT = 64;
/** A connection with nothing in flight for this long is closed (clients close theirs sooner). */
const IDLE_MS = 300_000;

/**
 * Serve JSON-RPC as newline-delimited JSON on `socket`: each line is a request
 * (or a batch), each answer one line (in the order they finish; ids tell them
 * apart). The same methods as `POST /rpc`, without HTTP's framing on either side
 * (about a third of a call's cost on a Unix socket). A line over the limit, one
 * left unfinished for 10 s, or 5 min with nothing in flight ends the connection.
 */
export function serveLines(socket: Socket, o: LineServing): { inFlight(): number } {
  let held: Buffer[] = [];
  let heldBytes = 0;
  let inFlight = 0;
  let timer: NodeJS.Timeout | undefined;
  const send = (value: unknown) => {
    if (!socket.destroyed) socket.write(`${JSON.stringify(value)}\n`);
  };
  const run = (line: Buffer) => {
    let payload: unknown;
    try {
      payload = JSON.parse(line.toString('utf8'));
    } catch {
      send(o.parseError());
      return;
    }
    inFlight++;
    if (inFlight >= MAX_IN_FLIGHT) socket.pause();
    const work = o.answer(payload).then(
      (out) => {
        if (out !== null) send(out);
      },
      () => socket.destroy(),
    );
    o.track(
      work.finally(() => {
        inFlight--;
        if (inFlight < MAX_IN_FLIGHT && socket.isPaused()) socket.resume();
      }),
    );
  };
  socket.on('data', (chunk: Buffer) => {
    let from = 0;
    for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, from)) {
      const part = chunk.subarray(from, nl);
      const line = heldBytes > 0 ? Buffer.concat([...held, part]) : part;
      held = [];
      heldBytes = 0;
      from = nl + 1;
      if (line.length > o.maxLineBytes) {
        send(o.tooLarge());
        socket.end();
        socket.destroySoon();
        return;
      }
      if (line.length > 0) run(line);
    }
    if (from < chunk.length) {
      const rest = chunk.subarray(from);
      held.push(rest);
      heldBytes += rest.length;
      if (heldBytes > o.maxLineBytes) {
        send(o.tooLarge());
        socket.end();
        socket.destroySoon();
        return;
      }
    }
    if (heldBytes > 0 && !timer) timer = setTimeout(() => socket.destroy(), PARTIAL_LINE_MS);
    else if (heldBytes === 0 && timer) {
      clearTimeout(timer);
      timer = undefined;
    }
  });
  socket.setTimeout(IDLE_MS, () => {
    if (inFlight === 0) socket.destroy();
  });
  socket.on('close', () => clearTimeout(timer));
  socket.on('error', () => socket.destroy());
  return { inFlight: () => inFlight };
}
