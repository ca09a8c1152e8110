import type { Socket } from 'node:net';

/** What a connection's lines are answered with. */
export interface LineServing {
  /** The largest line (one request or batch) accepted; a longer one ends the connection. */
  maxLineBytes: number;
  /** The answer to one parsed line: a response, a batch of them, or none (notifications). */
  /** The answer to one parsed line; `signal` aborts when the connection closes. */
  answer(payload: unknown, signal: AbortSignal): Promise<unknown | null>;
  /** The answer to a line that is not JSON. */
  parseError(): unknown;
  /** The answer to a line over `maxLineBytes` (sent before the connection ends). */
  tooLarge(): unknown;
  /** Each line's work, so a closing sidecar can wait for it (it never rejects). */
  track(work: Promise<void>): void;
}

/** A line held unfinished this long ends its connection (a slow or vanished client). */
const PARTIAL_LINE_MS = 10_000;
/** Calls a connection may have in flight (a batch counts each); more wait, unread. */
const MAX_IN_FLIGHT = 16;
/** A connection with nothing in flight for this long is closed (clients close theirs sooner). */
const IDLE_MS = 300_000;
/** Answers a client leaves unread past this end its connection. */
const MAX_UNREAD = 4 * 1024 * 1024;

/** A served connection, as its server stops it. */
export interface LineConnection {
  /** Read no more lines (calls in flight still answer). */
  stop(): void;
}

/**
 * Serve JSON-RPC as newline-delimited JSON on `socket`: each line is a request
 * (or a batch), each answer one line (in the order they finish; ids tell them
 * apart). The same methods as `POST /rpc`, without HTTP's framing on either side
 * (about a third of a call's cost on a Unix socket).
 *
 * What one client can hold is bounded: lines of at most `maxLineBytes`, one left
 * unfinished at most 10 s; at most 16 calls in flight (the rest stay unread in
 * the socket); answers it does not read stop the reading of its lines, and
 * 4 MiB of them end the connection; 5 min with nothing in flight end it too.
 */
export function serveLines(socket: Socket, o: LineServing): LineConnection {
  // Its calls are told when the connection closes (a waiting call stops waiting).
  const gone = new AbortController();
  socket.once('close', () => gone.abort());
  let held: Buffer[] = [];
  let heldBytes = 0;
  let inFlight = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  // Read only while there is room for more calls and the client reads its answers.
  const flow = () => {
    if (socket.destroyed) return;
    if (stopped || inFlight >= MAX_IN_FLIGHT || socket.writableNeedDrain) socket.pause();
    else socket.resume();
  };
  const send = (value: unknown) => {
    if (socket.destroyed || socket.writableEnded) return;
    try {
      socket.write(`${JSON.stringify(value)}\n`);
    } catch {
      socket.destroy();
      return;
    }
    if (socket.writableLength > MAX_UNREAD) socket.destroy();
  };
  const finishIfEnded = () => {
    if (inFlight === 0 && socket.readableEnded && !socket.writableEnded) socket.end();
  };
  const run = (line: Buffer) => {
    let payload: unknown;
    try {
      payload = JSON.parse(line.toString('utf8'));
    } catch {
      send(o.parseError());
      return;
    }
    const weight = Array.isArray(payload) ? Math.max(1, payload.length) : 1;
    inFlight += weight;
    const work = o
      .answer(payload, gone.signal)
      .then(
        (out) => {
          if (out !== null) send(out);
        },
        () => {
          socket.destroy();
        },
      )
      .catch(() => {
        socket.destroy();
      })
      .finally(() => {
        inFlight -= weight;
        flow();
        finishIfEnded();
      });
    o.track(work);
  };
  const onData = (chunk: Buffer) => {
    if (stopped) return;
    let from = 0;
    for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, from)) {
      const part = chunk.subarray(from, nl);
      const line = heldBytes > 0 ? Buffer.concat([...held, part]) : part;
      held = [];
      heldBytes = 0;
      from = nl + 1;
      if (line.length > o.maxLineBytes) {
        send(o.tooLarge());
        stopped = true;
        socket.end();
        socket.destroySoon();
        return;
      }
      if (line.length > 0) run(line);
      // No room for more calls: what is left of the chunk waits, unread, in the socket.
      if (inFlight >= MAX_IN_FLIGHT && from < chunk.length) {
        // Paused first: put back into a flowing stream, it would be read again at once.
        flow();
        socket.unshift(chunk.subarray(from));
        return;
      }
    }
    if (from < chunk.length) {
      const rest = chunk.subarray(from);
      held.push(rest);
      heldBytes += rest.length;
      if (heldBytes > o.maxLineBytes) {
        send(o.tooLarge());
        stopped = true;
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
    flow();
  };
  socket.on('data', onData);
  socket.on('drain', flow);
  // The client is done sending: what it asked is still answered, then the connection ends.
  socket.on('end', finishIfEnded);
  socket.setTimeout(IDLE_MS, () => {
    if (inFlight === 0) socket.destroy();
  });
  socket.on('close', () => clearTimeout(timer));
  socket.on('error', () => socket.destroy());
  return {
    stop: () => {
      stopped = true;
      flow();
    },
  };
}
