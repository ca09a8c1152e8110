import { connect, type Socket } from 'node:net';
import { BbError, type BbErrorCode } from '@bb/errors';

/** A connection with no call for this long is closed by the client (the sidecar waits 5 min). */
const IDLE_MS = 60_000;

/** The error for a server that cannot be reached at `socketPath`. */
export type Unreachable = (socketPath: string, err: unknown) => BbError;

/** Whom a client talks to, for its errors: `the forge sidecar`, and its error when unreachable. */
export interface Peer {
  name: string;
  unreachable: Unreachable;
  /** The code of a call whose connection was lost before its answer. @default FORGE_UNAVAILABLE */
  lost?: BbErrorCode;
}

const forgeUnreachable: Unreachable = (socketPath, err) =>
  new BbError(
    'FORGE_UNAVAILABLE',
    `cannot reach the forge sidecar at ${socketPath}: ${(err as Error).message}`,
    { cause: err },
  );

const FORGE_SIDECAR: Peer = { name: 'the forge sidecar', unreachable: forgeUnreachable };

type Pending = {
  resolve: (line: Record<string, unknown>) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  /** The request left this process (its write completed): the server may have it. */
  sent: boolean;
};

/** A request the connection lost before writing it: nothing reached the server, so it may go again. */
class NotSent extends Error {}

/**
 * `attempt`, again while the sidecar's socket is missing or refuses connections
 * (nothing was sent, so trying again is safe), for up to `waitMs`; then
 * `FORGE_UNAVAILABLE` naming the socket.
 */
export async function untilListening<T>(
  socketPath: string,
  waitMs: number,
  attempt: () => Promise<T>,
  unreachable: Unreachable = forgeUnreachable,
): Promise<T> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      return await attempt();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code === 'ENOENT' || code === 'ECONNREFUSED') && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
        continue;
      }
      throw unreachable(socketPath, err);
    }
  }
}

/** One connection speaking newline-delimited JSON-RPC: requests out, answers matched by id. */
class LineConnection {
  /** Calls waiting on the current socket (each socket has its own). */
  #pending = new Map<number, Pending>();
  readonly #of = new WeakMap<Socket, Map<number, Pending>>();
  #socket: Socket | undefined;
  #ready: Promise<Socket> | undefined;

  constructor(
    readonly socketPath: string,
    readonly connectWaitMs: number,
    readonly peer: Peer,
  ) {}

  get busy(): number {
    return this.#pending.size;
  }

  /** Connected, retrying while the socket is missing or refuses (nothing was sent). */
  #connect(): Promise<Socket> {
    if (this.#socket && !this.#socket.destroyed) return Promise.resolve(this.#socket);
    this.#ready ??= untilListening(
      this.socketPath,
      this.connectWaitMs,
      async () => {
        const s = await new Promise<Socket>((resolve, reject) => {
          const c = connect(this.socketPath);
          c.once('connect', () => {
            c.off('error', reject);
            resolve(c);
          });
          c.once('error', reject);
        });
        this.#adopt(s);
        return s;
      },
      this.peer.unreachable,
    ).finally(() => {
      this.#ready = undefined;
    });
    return this.#ready;
  }

  #adopt(s: Socket): void {
    const pending = new Map<number, Pending>();
    this.#of.set(s, pending);
    this.#pending = pending;
    this.#socket = s;
    s.setEncoding('utf8');
    // Idle, it holds no process open (a one-shot command exits) and goes after a minute,
    // well before the sidecar would close it: a call never races an idle close.
    s.unref();
    s.setTimeout(IDLE_MS, () => {
      if (pending.size > 0) return;
      // The next call opens a new connection; this one is only ended.
      if (this.#socket === s) this.#socket = undefined;
      s.end();
    });
    let held = '';
    s.on('data', (text: string) => {
      let from = 0;
      for (let nl = text.indexOf('\n'); nl >= 0; nl = text.indexOf('\n', from)) {
        const line = held + text.slice(from, nl);
        held = '';
        from = nl + 1;
        this.#answer(s, pending, line);
      }
      held += text.slice(from);
    });
    const fail = (err?: Error) => {
      if (this.#socket === s) this.#socket = undefined;
      for (const [id, p] of pending) {
        pending.delete(id);
        clearTimeout(p.timer);
        if (!p.sent) {
          p.reject(new NotSent());
          continue;
        }
        p.reject(
          new BbError(
            this.peer.lost ?? 'FORGE_UNAVAILABLE',
            `${this.peer.name} at ${this.socketPath} closed the connection before it answered${err ? ` (${err.message})` : ''}`,
          ),
        );
      }
    };
    s.on('error', (err) => {
      fail(err);
      s.destroy();
    });
    s.on('close', () => fail());
  }

  #answer(s: Socket, pending: Map<number, Pending>, line: string): void {
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    if (typeof body !== 'object' || body === null) return;
    const p = typeof body['id'] === 'number' ? pending.get(body['id']) : undefined;
    if (!p) return;
    pending.delete(body['id'] as number);
    clearTimeout(p.timer);
    if (pending.size === 0) s.unref();
    p.resolve(body);
  }

  async send(id: number, line: string, timeoutMs: number): Promise<Record<string, unknown>> {
    const s = await this.#connect();
    const pending = this.#of.get(s)!;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        if (pending.size === 0) s.unref();
        reject(new BbError('TIMEOUT', `${this.peer.name} did not answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const p: Pending = { resolve, reject, timer, sent: false };
      pending.set(id, p);
      s.ref();
      s.write(line, (err) => {
        if (!err) p.sent = true;
      });
    });
  }

  close(): void {
    this.#socket?.end();
    this.#socket = undefined;
  }
}

/**
 * Connections to a gate (the forge or the supervise sidecar) speaking
 * newline-delimited JSON-RPC, each call on the least busy of them (up to
 * `connections`, opened as needed).
 */
export class LineClient {
  readonly #conns: LineConnection[] = [];

  constructor(
    readonly socketPath: string,
    readonly connections: number,
    readonly connectWaitMs: number,
    readonly peer: Peer = FORGE_SIDECAR,
  ) {}

  call(id: number, request: unknown, timeoutMs: number): Promise<Record<string, unknown>> {
    let pick = this.#conns.find((c) => c.busy === 0);
    if (!pick && this.#conns.length < this.connections) {
      pick = new LineConnection(this.socketPath, this.connectWaitMs, this.peer);
      this.#conns.push(pick);
    }
    pick ??= this.#conns.reduce((a, b) => (b.busy < a.busy ? b : a));
    const line = `${JSON.stringify(request)}\n`;
    // A kept connection the server closed a moment ago (it restarted) fails the write:
    // nothing was sent, so the call goes once more, on a new connection.
    return pick.send(id, line, timeoutMs).catch((err) => {
      if (!(err instanceof NotSent)) throw err;
      return pick.send(id, line, timeoutMs).catch((again) => {
        if (again instanceof NotSent)
          throw new BbError(
            this.peer.lost ?? 'FORGE_UNAVAILABLE',
            `${this.peer.name} at ${this.socketPath} closed the connection before the call was sent`,
          );
        throw again;
      });
    });
  }

  close(): void {
    for (const c of this.#conns.splice(0)) c.close();
  }
}
