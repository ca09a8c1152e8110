import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

/** How a tunnel handed to bb-tunnel ended. */
export interface TunnelEnd {
  /** Bytes from the client (what it sent after its CONNECT head included). */
  bytesUp: number;
  bytesDown: number;
  /** Whether the destination was reached and the client told 200. */
  reached: boolean;
  /** bb-tunnel went before the tunnel ended: its bytes are not known. */
  lost?: true;
}

export interface TunnelTarget {
  address: string;
  port: number;
  /** The name the client asked for: a 502 names it. */
  host: string;
  connectTimeoutMs: number;
}

/** The most a client may have sent past its CONNECT head for bb-tunnel to carry it (its buffer). */
const EARLY_MAX = 60 * 1024;

/**
 * bb-tunnel (native/bb-tunnel.c) where the build made it: beside this module once
 * bundled (a bottle's runtime directory, dist/bundle), in dist/bundle from dist, or
 * from the source tree.
 */
export function findTunnelProgram(): string | undefined {
  for (const rel of ['./bb-tunnel', './bundle/bb-tunnel', '../dist/bundle/bb-tunnel']) {
    const p = fileURLToPath(new URL(rel, import.meta.url));
    if (existsSync(p)) return p;
  }
  return undefined;
}

interface Handed {
  end: (e: TunnelEnd) => void;
  /** Called when the handle was not sent: the socket is still ours to carry. */
  back: () => void;
  /** queued: not written yet; sent: bb-tunnel has the fd; ended: it said how; back: given back. */
  state: 'queued' | 'sent' | 'ended' | 'back';
}

/** How long a handle may wait to be written before bb-tunnel is taken for stuck. */
const SEND_WAIT_MS = 5000;

/** Undo the readStop behind the stream's back, so resuming the stream reads again. */
function readAgain(client: Socket): void {
  const state = (client as Socket & { _readableState?: { reading: boolean } })._readableState;
  if (state) state.reading = false;
}

/**
 * Allowed CONNECT tunnels carried by bb-tunnel, a C relay the proxy starts at its
 * first tunnel: the proxy decides, resolves and logs, then hands the agent's
 * connection (its fd, over Node's IPC channel) and the checked address to it, and
 * learns the bytes when the tunnel ends. Node then holds nothing of the tunnel, and
 * its bytes move at a blind relay's cost. Without the program, or once it failed,
 * `hand` says no and the proxy carries the tunnel itself.
 */
export class TunnelCarrier {
  #child: ChildProcess | undefined;
  #failed = false;
  #closing = false;
  #next = 1;
  readonly #open = new Map<number, Handed>();

  readonly program: string | undefined;

  /** `program`: bb-tunnel's path (it must be there); by default the one the build made, if any. */
  constructor(program?: string) {
    if (program !== undefined && !existsSync(program))
      throw new Error(
        `the tunnel program ${program} does not exist: build it (pnpm build makes dist/bundle/bb-tunnel), or carry tunnels in node (tunnelProgram: false)`,
      );
    this.program = program ?? findTunnelProgram();
  }

  /** Tunnels handed over and not ended. */
  get open(): number {
    return this.#open.size;
  }

  /**
   * Hand `client` (paused, its CONNECT head read; `early` is what came after) to
   * bb-tunnel to connect to `to` and carry. `end` is told how it ended. False when it
   * cannot be handed: nothing was taken, the caller carries it. `back` is called,
   * with everything the client sent so far, when handing failed after this said yes.
   */
  hand(
    client: Socket,
    early: Buffer,
    to: TunnelTarget,
    end: (e: TunnelEnd) => void,
    back: (early: Buffer) => void,
  ): boolean {
    const handle = (client as Socket & { _handle?: { readStop(): number; reading?: boolean } })
      ._handle;
    // Answers still being written to the client (to requests pipelined before the
    // CONNECT) would be lost with our copy of the socket: such a tunnel stays here.
    if (!handle || client.writableLength > 0) return false;
    const child = this.#childProcess();
    if (!child) return false;
    // What the client sent while the destination was being checked is read from its
    // stream here; then its handle stops reading, so no byte is read into Node after.
    const parts = [early];
    for (let c = client.read() as Buffer | null; c !== null; c = client.read() as Buffer | null)
      parts.push(c);
    handle.reading = false;
    handle.readStop();
    const all = parts.length === 1 ? early : Buffer.concat(parts);
    const giveBack = () => {
      readAgain(client);
      back(all);
    };
    if (all.length > EARLY_MAX) {
      giveBack();
      return true;
    }
    const id = this.#next++;
    const hex = (b: Buffer) => (b.length ? b.toString('hex') : '-');
    const msg = {
      bb: `${id} ${to.address} ${to.port} ${to.connectTimeoutMs} ${hex(all)} ${hex(Buffer.from(to.host))}`,
    };
    const handed: Handed = { end, back: giveBack, state: 'queued' };
    this.#open.set(id, handed);
    // A bb-tunnel that stops taking handles (each waits for the last one's
    // acknowledgement) is killed: what it held comes back, as when it dies.
    const stuck = setTimeout(() => child.kill('SIGKILL'), SEND_WAIT_MS);
    stuck.unref();
    child.send(msg, handle as never, (err) => {
      clearTimeout(stuck);
      if (handed.state === 'back') return; // carried here already (bb-tunnel went)
      if (err) {
        if (handed.state !== 'queued') return;
        handed.state = 'back';
        this.#open.delete(id);
        return handed.back();
      }
      // The fd is bb-tunnel's now (the kernel holds it in flight): ours is closed, which
      // leaves the connection open. (Its end may have been told already.)
      if (handed.state === 'queued') handed.state = 'sent';
      client.destroy();
    });
    return true;
  }

  /**
   * End every tunnel handed over: bb-tunnel ends each, says what it carried (each
   * `end` is called), and goes; one that does not within two seconds is killed.
   */
  async close(): Promise<void> {
    this.#closing = true;
    const child = this.#child;
    if (!child) return;
    const gone = new Promise<void>((resolve) => child.once('close', () => resolve()));
    child.kill('SIGTERM');
    const kill = setTimeout(() => child.kill('SIGKILL'), 2000);
    await gone;
    clearTimeout(kill);
  }

  #childProcess(): ChildProcess | undefined {
    if (this.#closing) return undefined;
    if (this.#child || this.#failed || !this.program) return this.#child;
    const child = spawn(this.program, [], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      env: { BB_RELAY_PARENT: String(process.pid) },
    });
    this.#child = child;
    // The proxy's own servers keep its process alive; bb-tunnel does not.
    child.unref();
    child.channel?.unref();
    child.on('message', (m: { bb?: unknown }) => {
      if (typeof m?.bb !== 'string') return;
      const [id, up, down, reached] = m.bb.split(' ').map(Number);
      const t = this.#open.get(id!);
      if (!t) return;
      this.#open.delete(id!);
      t.state = 'ended';
      t.end({ bytesUp: up!, bytesDown: down!, reached: reached === 1 });
    });
    child.on('error', (err) => {
      if (!this.#closing)
        process.stderr.write(`bb-tunnel: ${err.message}; tunnels are carried by node\n`);
    });
    // 'close', not 'exit': every line it sent has been read by then.
    child.once('close', () => {
      if (this.#child === child) this.#child = undefined;
      // Gone unasked, it is not started again: the proxy carries its tunnels from now.
      if (!this.#closing) this.#failed = true;
      for (const [id, t] of this.#open) {
        this.#open.delete(id);
        // Handed over: whether it was reached is not known either; the line says so.
        if (t.state === 'sent') {
          t.state = 'ended';
          t.end({ bytesUp: 0, bytesDown: 0, reached: true, lost: true });
        } else if (this.#closing) {
          // Never handed, and the proxy is closing: its clients go too.
          t.state = 'ended';
          t.end({ bytesUp: 0, bytesDown: 0, reached: false });
        } else {
          t.state = 'back';
          t.back();
        }
      }
    });
    return child;
  }
}
