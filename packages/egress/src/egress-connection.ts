import { connect, type Socket } from 'node:net';
import { resolveDestination } from './addresses';
import { DENIAL_FIX, denialBody } from './denial';
import { carryTunnel } from './egress-tunnel';
import { CONNECTION_HEADERS } from './headers';
import {
  ChunkedScanner,
  FramingError,
  headerValues,
  listTokens,
  parseRequestHead,
  type RequestHead,
  requestFraming,
} from './http-framing';
import { type EgressLogger, type LogTicket, plainTicket } from './log';
import { ResponseMeter } from './response-meter';
import { decide, type EgressRule } from './rules';
import type { TunnelCarrier } from './tunnel-carrier';

/** What every connection of one proxy shares. */
export interface EgressContext {
  rules(): readonly EgressRule[];
  log: EgressLogger;
  maxHeaderBytes: number;
  headersTimeoutMs: number;
  connectTimeoutMs: number;
  idleTimeoutMs: number;
  canLog?: (() => boolean) | undefined;
  reserve?: (() => LogTicket) | undefined;
  /** Every upstream socket open, so closing the proxy cuts them. */
  upstreams: Set<Socket>;
  /** Carries allowed tunnels outside Node when it can. */
  tunnels?: TunnelCarrier | undefined;
}

/** Requests sent on one connection and not answered yet: the next one waits past this. */
export const MAX_IN_FLIGHT = 16;

/** How long a refused connection may stay half open for its answer to arrive. */
const REFUSED_LINGER_MS = 2000;

const HEAD_END = Buffer.from('\r\n\r\n');

/**
 * The status line's words for an egress denial: what a client that shows no body
 * shows (Python's http.client, and so pip, prints a refused tunnel's reason phrase).
 */
const DENIED_PHRASE = `Forbidden by bot-bottle; ask with ${DENIAL_FIX.egress.tool}`;

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
  501: 'Not Implemented',
  502: 'Bad Gateway',
  503: 'Service Unavailable',
  505: 'HTTP Version Not Supported',
};

/** What frames a message: a Connection header may not ask the proxy to drop these. */
const FRAMING = new Set(['content-length', 'transfer-encoding', 'host']);

/** Whether the allowlist names this very address (for this port): then an internal one is allowed. */
const listedAddress = (rules: readonly EgressRule[], port: number) => (ip: string) =>
  rules.some((r) => !r.wildcard && r.host === ip.toLowerCase() && r.ports.includes(port));

interface Upstream {
  socket: Socket;
  /** `host:port` as the request named it: only the same destination reuses it. */
  key: string;
  /** The rules it was opened under: after a reload it is not reused (its address is checked again). */
  rules: readonly EgressRule[];
  meter: ResponseMeter;
  /** Replaced, refused or closed: nothing more is sent on it, and its end no longer ends the client. */
  retired: boolean;
}

/** An allowed request on its way: logged once answered and its body is all sent (or cut). */
interface Sent {
  method: string;
  host: string;
  port: number;
  rule: string;
  started: number;
  bytesUp: number;
  up: Upstream | undefined;
  /** Its body is still being carried. */
  body: boolean;
  answer?: { status: number | undefined; bytesDown: number };
  ticket: LogTicket;
}

/**
 * One agent connection to the egress proxy. Each request's head is read and
 * decided on its own (the allowlist, the resolved address, the log's room);
 * an allowed request's head is rewritten to origin form without hop-by-hop
 * headers and its body carried byte for byte to an upstream connection kept
 * for that destination; responses come back untouched, counted for the log.
 * `CONNECT` becomes a blind tunnel. Any refusal closes the connection.
 *
 * Memory is bounded per connection: the client is paused while its upstream
 * cannot take more, while a destination is being opened, and while
 * MAX_IN_FLIGHT requests wait for their answers.
 */
export class EgressConnection {
  private pending: Buffer = Buffer.alloc(0);
  private state: 'head' | 'length' | 'chunked' | 'wait' | 'tunnel' | 'closing' | 'done' = 'head';
  private left = 0;
  private scanner: ChunkedScanner | undefined;
  private up: Upstream | undefined;
  /** The request whose body is being carried. */
  private sending: Sent | undefined;
  /** The request that asked to close the connection after it. */
  private last = false;
  private headTimer: NodeJS.Timeout | undefined;
  /** The client sent its FIN: what it already sent is finished, then the connection ends. */
  private ended = false;
  /** Moving to another server, once the current one has answered what it owes. */
  private afterAnswers: (() => void) | undefined;
  /** A refusal waiting for the answers owed before it. */
  private refusal: string | undefined;
  /** The upstream socket whose buffer is full: nothing more is read until it drains. */
  private blockedOn: Socket | undefined;
  private pumping = false;

  constructor(
    private readonly client: Socket,
    private readonly ctx: EgressContext,
  ) {
    client.setTimeout(ctx.idleTimeoutMs, () => client.destroy());
    client.on('data', this.onData);
    client.on('end', () => {
      this.ended = true;
      this.finishIfEnded();
    });
    client.on('error', () => client.destroy());
    client.on('close', () => {
      this.clearHeadTimer();
      this.state = 'done';
      this.retire();
    });
    this.startHeadTimer();
  }

  private readonly onData = (chunk: Buffer): void => {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pump();
  };

  /** Whether the client's bytes may be read and acted on now. */
  private get flowing(): boolean {
    if (this.blockedOn || this.refusal !== undefined || this.afterAnswers) return false;
    if (this.state === 'length' || this.state === 'chunked') return true;
    if (this.state !== 'head') return false;
    return !this.up || this.up.retired || this.up.meter.waiting < MAX_IN_FLIGHT;
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.pending.length > 0 && this.flowing && this.step()) {}
    } finally {
      this.pumping = false;
    }
    if (this.state === 'closing' || this.state === 'done') {
      // The client said its last request was sent: nothing more is read.
      this.pending = Buffer.alloc(0);
    } else if (!this.flowing && this.state !== 'tunnel') this.client.pause();
    this.finishIfEnded();
  }

  /** Act on what is pending in the current state; false when it needs more bytes. */
  private step(): boolean {
    switch (this.state) {
      case 'head': {
        // Empty lines before a request line are allowed (RFC 9112 §2.2), within the head's time.
        let skip = 0;
        while (this.pending[skip] === 13 && this.pending[skip + 1] === 10) skip += 2;
        if (skip) {
          this.pending = this.pending.subarray(skip);
          this.startHeadTimer();
        }
        const end = this.pending.indexOf(HEAD_END);
        if (end < 0 || end > this.ctx.maxHeaderBytes) {
          if (this.pending.length > this.ctx.maxHeaderBytes) {
            this.refuse(431, 'request headers too large');
            return false;
          }
          if (this.pending.length > 0) this.startHeadTimer();
          return false;
        }
        this.clearHeadTimer();
        const text = this.pending.toString('latin1', 0, end);
        this.pending = this.pending.subarray(end + 4);
        this.onHead(text, end + 4);
        return true;
      }
      case 'length': {
        const take = Math.min(this.left, this.pending.length);
        this.carry(this.pending.subarray(0, take));
        this.pending = this.pending.subarray(take);
        this.left -= take;
        if (this.left === 0) this.requestSent();
        return true;
      }
      case 'chunked': {
        let took: number;
        try {
          took = this.scanner!.push(this.pending);
        } catch (err) {
          this.refuse(400, (err as Error).message);
          return false;
        }
        this.carry(this.pending.subarray(0, took));
        this.pending = this.pending.subarray(took);
        if (this.scanner!.done) this.requestSent();
        return true;
      }
      default:
        return false;
    }
  }

  /** Read again if nothing holds the client back any more. */
  private wake(): void {
    if (!this.flowing) return;
    this.client.resume();
    this.pump();
  }

  /**
   * Once the client has sent its FIN and its last request is on its way, the
   * upstream gets a FIN too (its answer still comes back, then both close).
   */
  private finishIfEnded(): void {
    if (!this.ended || !(this.state === 'head' || this.state === 'closing')) return;
    this.state = 'done';
    this.clearHeadTimer();
    if (this.up && !this.up.retired) this.up.socket.end();
    else this.client.end();
  }

  private onHead(text: string, size: number) {
    let head: RequestHead;
    try {
      head = parseRequestHead(text);
      if (head.method === 'CONNECT') return this.tunnel(head);
      this.forward(head, size);
    } catch (err) {
      if (err instanceof FramingError) return this.refuse(err.status, err.message);
      throw err;
    }
  }

  private forward(head: RequestHead, size: number) {
    const started = Date.now();
    let url: URL;
    try {
      url = new URL(head.target);
    } catch {
      return this.refuse(
        400,
        'this is a proxy: send absolute-form requests (http://host/path) or CONNECT',
      );
    }
    if (url.protocol !== 'http:')
      return this.refuse(
        400,
        `only http:// is forwarded as plain requests; use CONNECT for ${url.protocol}`,
      );
    if (url.username || url.password)
      return this.refuse(400, 'a request target may not carry credentials (user:pass@host)');
    const port = Number(url.port || 80);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const framing = requestFraming(head);
    const hosts = headerValues(head, 'host');
    if (hosts.length > 1) return this.refuse(400, 'a request may carry one Host header only');
    // A Host header that names somewhere else is an attempt to smuggle a request past the rule.
    const hostHeader = (hosts[0] ?? '').toLowerCase();
    if (hostHeader && hostHeader !== url.host.toLowerCase()) {
      this.denied(host, port, `Host header ${hostHeader} does not match ${url.host}`, head.method);
      return this.refuse(
        400,
        `the Host header (${hostHeader}) does not match the request target (${url.host})`,
      );
    }
    const named = listTokens(headerValues(head, 'connection'));
    const framingNamed = named.find((t) => FRAMING.has(t));
    if (framingNamed) return this.refuse(400, `the Connection header may not name ${framingNamed}`);
    if (this.ctx.canLog && !this.ctx.canLog())
      return this.refuse(503, 'the egress log is full: nothing more can go out of this bottle');
    const d = decide(this.ctx.rules(), host, port);
    if (!d.allowed) {
      return this.refuseEgress(host, port, d.rule, head.method);
    }
    this.last = head.minor === 0 || named.includes('close');
    // The head as it goes upstream: origin form, the target's authority as its Host
    // (RFC 9112 §3.2.2), nothing hop-by-hop.
    let out = `${head.method} ${url.pathname}${url.search} HTTP/1.${head.minor}\r\nHost: ${url.host}\r\n`;
    for (let i = 0; i < head.headers.length; i++) {
      const lower = head.names[i]!;
      if (lower === 'host' || CONNECTION_HEADERS.has(lower) || named.includes(lower)) continue;
      out += `${head.headers[i]![0]}: ${head.headers[i]![1]}\r\n`;
    }
    if (this.last && head.minor === 1) out += 'Connection: close\r\n';
    out += '\r\n';

    const sent: Sent = {
      method: head.method,
      host,
      port,
      rule: d.rule,
      started,
      bytesUp: size,
      up: undefined,
      body: framing.kind !== 'none',
      ticket: this.ctx.reserve?.() ?? plainTicket(this.ctx.log),
    };
    const send = () => {
      const up = this.up!;
      sent.up = up;
      up.meter.expect({
        method: head.method,
        ended: (status, bytesDown) => {
          sent.answer = { status, bytesDown };
          if (!sent.body) this.logSent(sent);
          this.wake();
        },
      });
      if (framing.kind === 'length') {
        this.sending = sent;
        this.state = 'length';
        this.left = framing.bytes;
      } else if (framing.kind === 'chunked') {
        this.sending = sent;
        this.state = 'chunked';
        this.scanner = new ChunkedScanner();
      }
      if (!up.socket.write(out, 'latin1')) this.blockOn(up.socket);
      if (framing.kind === 'none') this.requestSent();
    };
    const key = `${host}:${port}`;
    const current = this.up;
    if (
      current &&
      !current.retired &&
      !current.socket.destroyed &&
      current.key === key &&
      current.rules === this.ctx.rules()
    )
      return send();

    this.state = 'wait';
    // Decided again when it is opened (answers owed before may take long, and a
    // reload may come meanwhile): the rules of that moment decide, resolve and tag it.
    const elsewhere = () => {
      const rules = this.ctx.rules();
      const again = decide(rules, host, port);
      if (!again.allowed) {
        sent.ticket();
        return this.refuseEgress(host, port, again.rule, head.method);
      }
      sent.rule = again.rule;
      void resolveDestination(host, listedAddress(rules, port)).then((where) => {
        if (this.state !== 'wait') return sent.ticket();
        if (!where.ok) {
          sent.ticket();
          return this.refuseEgress(host, port, where.reason, head.method);
        }
        this.open(
          where.address,
          port,
          key,
          rules,
          () => {
            send();
            this.wake();
          },
          (err) => {
            sent.ticket();
            this.refuse(502, `cannot reach ${host}:${port}: ${err.message}`);
          },
        );
      });
    };
    // Answers the current server still owes (pipelined requests) arrive before it is left.
    if (current && !current.retired && !current.meter.idle) {
      this.afterAnswers = () => {
        this.retire();
        elsewhere();
      };
      current.meter.onIdle = () => this.runAfterAnswers();
    } else {
      this.retire();
      elsewhere();
    }
  }

  /** Open the upstream for `key`; `ready` once connected, `failed` (once) if it never is. */
  private open(
    address: string,
    port: number,
    key: string,
    rules: readonly EgressRule[],
    ready: () => void,
    failed: (err: Error) => void,
  ): void {
    const socket = connect({ host: address, port, timeout: this.ctx.connectTimeoutMs });
    const up: Upstream = { socket, key, rules, meter: new ResponseMeter(), retired: false };
    this.up = up;
    this.ctx.upstreams.add(socket);
    let connected = false;
    let settled = false;
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      up.retired = true;
      failed(err);
    };
    socket.once('connect', () => {
      connected = true;
      settled = true;
      socket.setTimeout(0);
      ready();
    });
    socket.once('timeout', () => socket.destroy(new Error('connect timeout')));
    socket.on('data', (chunk: Buffer) => {
      // The bytes go on first; counting them (and so logging a finished request) after.
      if (!up.retired && !this.client.write(chunk)) {
        socket.pause();
        this.client.once('drain', () => socket.resume());
      }
      up.meter.feed(chunk);
    });
    socket.on('error', (err) => {
      if (!connected) return fail(err);
      if (!up.retired) this.client.destroy();
    });
    socket.once('close', () => {
      this.ctx.upstreams.delete(socket);
      // Closed before it connected (the client went, or the proxy closed): never opened.
      if (!connected) fail(new Error('closed before it connected'));
      if (this.blockedOn === socket) this.blockedOn = undefined;
      if (this.up === up) this.up = undefined;
      // A body cut off by this close is as sent as it will ever be.
      const cut = this.sending?.up === up ? this.sending : undefined;
      if (cut) {
        this.sending = undefined;
        cut.body = false;
        if (cut.answer) this.logSent(cut);
      }
      // Between requests the server may close a kept connection: the next request opens another.
      // Closed with answers still owed, the client's connection ends too (after what arrived).
      const idle = up.meter.idle && this.state === 'head' && this.pending.length === 0;
      const ends =
        !up.retired && connected && !idle && this.refusal === undefined && !this.afterAnswers;
      up.retired = true;
      if (ends) {
        this.state = 'done';
        this.pending = Buffer.alloc(0);
      }
      up.meter.end();
      if (this.refusal !== undefined) return this.sendRefusal();
      if (this.afterAnswers) return this.runAfterAnswers();
      // end(), not destroy(): bytes still buffered for the client must arrive.
      if (ends) this.client.end();
    });
  }

  /** Carry request body bytes upstream; the client waits while the upstream is full. */
  private carry(bytes: Buffer): void {
    if (bytes.length === 0) return;
    if (this.sending) this.sending.bytesUp += bytes.length;
    const up = this.up;
    if (!up || up.retired) return;
    if (!up.socket.write(bytes)) this.blockOn(up.socket);
  }

  private blockOn(socket: Socket): void {
    if (this.blockedOn) return;
    this.blockedOn = socket;
    socket.once('drain', () => {
      if (this.blockedOn !== socket) return;
      this.blockedOn = undefined;
      this.wake();
    });
  }

  private requestSent(): void {
    const sent = this.sending;
    this.sending = undefined;
    this.scanner = undefined;
    if (sent) {
      sent.body = false;
      if (sent.answer) this.logSent(sent);
    }
    this.state = this.last ? 'closing' : 'head';
    this.finishIfEnded();
  }

  private logSent(s: Sent): void {
    s.ticket({
      time: new Date().toISOString(),
      kind: 'egress',
      host: s.host,
      port: s.port,
      decision: 'allowed',
      rule: s.rule,
      method: s.method,
      ...(s.answer?.status === undefined ? {} : { status: s.answer.status }),
      bytesUp: s.bytesUp,
      bytesDown: s.answer?.bytesDown ?? 0,
      durationMs: Date.now() - s.started,
    });
  }

  private tunnel(head: RequestHead) {
    const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(head.target);
    if (!m) {
      this.denied(head.target, 0, 'CONNECT target is not host:port');
      return this.refuse(
        400,
        `CONNECT needs host:port, got ${JSON.stringify(head.target).slice(0, 100)}`,
      );
    }
    const host = m[1]!.replace(/^\[|\]$/g, '');
    const port = Number(m[2]);
    if (this.ctx.canLog && !this.ctx.canLog())
      return this.refuse(503, 'the egress log is full: nothing more can go out of this bottle');
    const d = decide(this.ctx.rules(), host, port);
    if (!d.allowed) {
      return this.refuseEgress(host, port, d.rule, 'CONNECT');
    }
    this.retire();
    this.state = 'tunnel';
    this.client.off('data', this.onData);
    this.client.pause();
    // Room for this tunnel's line is held from now: what was allowed is always logged.
    const ticket = this.ctx.reserve?.() ?? plainTicket(this.ctx.log);
    void resolveDestination(host, listedAddress(this.ctx.rules(), port)).then((where) => {
      if (this.client.destroyed) return ticket();
      if (!where.ok) {
        ticket();
        return this.refuseEgress(host, port, where.reason, 'CONNECT');
      }
      const early = this.pending;
      this.pending = Buffer.alloc(0);
      carryTunnel(
        {
          client: this.client,
          early,
          address: where.address,
          host,
          port,
          rule: d.rule,
          connectTimeoutMs: this.ctx.connectTimeoutMs,
          upstreams: this.ctx.upstreams,
          ticket,
          refuse: (status, reason) => this.refuse(status, reason),
        },
        this.ctx.tunnels,
      );
    });
  }

  /** Stop using the current upstream: it is closed, and what it owed is logged. */
  private retire(): void {
    const up = this.up;
    if (!up) return;
    up.retired = true;
    this.up = undefined;
    if (this.blockedOn === up.socket) this.blockedOn = undefined;
    up.socket.destroy();
  }

  private denied(host: string, port: number, rule: string, method?: string): void {
    this.ctx.log({
      time: new Date().toISOString(),
      kind: 'egress',
      host,
      port,
      decision: 'denied',
      rule,
      ...(method ? { method } : {}),
      bytesUp: 0,
      bytesDown: 0,
      durationMs: 0,
    });
  }

  /** Log and refuse a denied destination, saying how to ask for it (body and status line). */
  private refuseEgress(host: string, port: number, rule: string, method: string): void {
    this.denied(host, port, rule, method);
    this.refuse(403, '', denialBody('egress', { host, port }, rule), DENIED_PHRASE);
  }

  /** Answer with an error (its reason as text, or `json`) and close the connection. */
  private refuse(status: number, reason: string, json?: string, phrase?: string): void {
    this.clearHeadTimer();
    this.state = 'done';
    this.pending = Buffer.alloc(0);
    const body = json ?? `${reason}\n`;
    this.refusal = `HTTP/1.1 ${status} ${phrase ?? STATUS_TEXT[status] ?? 'Error'}\r\ncontent-type: ${json ? 'application/json' : 'text/plain'}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
    // Answers still owed to requests before this one (pipelined) go first; a request
    // cut off in its body owes nothing and is dropped with its connection.
    const up = this.up;
    if (up && !up.retired && !up.meter.idle && !this.sending) {
      this.client.pause();
      up.meter.onIdle = () => this.sendRefusal();
      return;
    }
    this.sendRefusal();
  }

  private runAfterAnswers(): void {
    const next = this.afterAnswers;
    this.afterAnswers = undefined;
    next?.();
  }

  private sendRefusal(): void {
    const refusal = this.refusal;
    if (refusal === undefined) return;
    this.refusal = undefined;
    this.retire();
    if (!this.client.writable) return void this.client.destroy();
    this.client.end(refusal);
    // Half-open connections are allowed: a client that keeps its side open after a
    // refusal is cut once the answer is out and had time to arrive.
    this.client.once('finish', () =>
      setTimeout(() => this.client.destroy(), REFUSED_LINGER_MS).unref(),
    );
  }

  private startHeadTimer(): void {
    if (this.headTimer) return;
    this.headTimer = setTimeout(() => {
      this.headTimer = undefined;
      // A whole head waiting its turn (pipelined past MAX_IN_FLIGHT) is not late.
      if (this.state === 'head' && this.pending.indexOf(HEAD_END) < 0)
        this.refuse(408, 'request headers took too long');
    }, this.ctx.headersTimeoutMs);
    this.headTimer.unref();
  }

  private clearHeadTimer(): void {
    if (this.headTimer) clearTimeout(this.headTimer);
    this.headTimer = undefined;
  }
}
