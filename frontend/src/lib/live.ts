// The live stream client: one websocket to /api/live that resumes with ?after=<last seq> after
// a drop, backs off exponentially (with jitter) between attempts, drops duplicate or replayed
// events by seq, treats a silent connection as dead (the server sends stats every 5 s), and
// gives up on an attempt that does not open in time (a guardian that accepts the connection
// but never answers, e.g. stopped or overloaded) and tries again with the same backoff.

import { parseJsonExact } from './exactjson';
import type { LiveEvent } from './types';

export type LiveStatus = 'connecting' | 'open' | 'waiting' | 'stopped';

export interface LiveState {
  status: LiveStatus;
  /** Highest stored seq seen. */
  lastSeq: number;
  /** Failed attempts since the last good connection. */
  attempt: number;
  /** When status is 'waiting': epoch ms of the next attempt. */
  retryAt: number | null;
  /** Last error or close reason, for the status tooltip. */
  reason: string;
  /**
   * Epoch ms since when the stream has not been open (the first attempt's start, or the
   * moment it dropped); null while it is open and when stopped.
   */
  downSince: number | null;
}

/** The subset of WebSocket the client uses, so tests can pass a fake. */
export interface SocketLike {
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  close(code?: number, reason?: string): void;
}

export interface Timers {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export interface LiveOptions {
  /** ws:// or wss:// URL of /api/live, without query. */
  url: string;
  /** Only this session's events (stats are still sent). */
  session?: string;
  /** Resume after this seq on the first connection too. */
  after?: number;
  onEvents: (events: LiveEvent[]) => void;
  onState?: (s: LiveState) => void;
  createSocket?: (url: string) => SocketLike;
  timers?: Timers;
  random?: () => number;
  minDelayMs?: number;
  maxDelayMs?: number;
  /** No frame for this long → reconnect. */
  staleMs?: number;
  /** An attempt that has not opened after this long is abandoned and retried. */
  openTimeoutMs?: number;
  /** Events arriving within this window are delivered together (one UI update). */
  batchMs?: number;
}

/** Delay before attempt n (1-based) of a reconnect: exponential, capped, with 50–100 % jitter. */
export function backoffDelay(attempt: number, minMs: number, maxMs: number, random: () => number): number {
  const exp = Math.min(maxMs, minMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(exp * (0.5 + random() * 0.5));
}

/** The URL for one connection attempt. */
export function connectUrl(url: string, lastSeq: number, session?: string): string {
  const q = new URLSearchParams();
  if (lastSeq > 0) q.set('after', String(lastSeq));
  if (session) q.set('session', session);
  const s = q.toString();
  return s ? `${url}${url.includes('?') ? '&' : '?'}${s}` : url;
}

/**
 * Parses one frame; returns null for anything that is not a live event. Its steps, holds and
 * audit entries carry what agents sent: their numbers are read exactly (see exactjson).
 */
export function parseFrame(data: unknown): LiveEvent | null {
  if (typeof data !== 'string') return null;
  let v: unknown;
  try {
    v = parseJsonExact(data);
  } catch {
    return null;
  }
  if (!v || typeof v !== 'object') return null;
  const e = v as { seq?: unknown; type?: unknown };
  if (typeof e.type !== 'string' || typeof e.seq !== 'number') return null;
  return v as LiveEvent;
}

/**
 * Keeps the events not seen yet, in order, and the new high-water mark. Events with seq 0 (stats)
 * are never stored and always pass.
 */
export function dedupe(events: LiveEvent[], lastSeq: number): { fresh: LiveEvent[]; lastSeq: number } {
  const fresh: LiveEvent[] = [];
  let hi = lastSeq;
  for (const e of events) {
    if (e.seq === 0) {
      fresh.push(e);
      continue;
    }
    if (e.seq <= hi) continue;
    hi = e.seq;
    fresh.push(e);
  }
  return { fresh, lastSeq: hi };
}

const realTimers: Timers = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
  clearTimeout: (h) => globalThis.clearTimeout(h as ReturnType<typeof setTimeout>),
};

export class LiveClient {
  private readonly opts: Required<Omit<LiveOptions, 'session' | 'after' | 'onState'>> & Pick<LiveOptions, 'session' | 'onState'>;
  private socket: SocketLike | null = null;
  private retryTimer: unknown = null;
  private staleTimer: unknown = null;
  private openTimer: unknown = null;
  private flushTimer: unknown = null;
  private pending: LiveEvent[] = [];
  private gotFrame = false;
  state: LiveState;

  constructor(opts: LiveOptions) {
    this.opts = {
      createSocket: (u) => new WebSocket(u) as unknown as SocketLike,
      timers: realTimers,
      random: Math.random,
      minDelayMs: 500,
      maxDelayMs: 30_000,
      staleMs: 20_000,
      openTimeoutMs: 10_000,
      batchMs: 100,
      ...opts,
    };
    this.state = { status: 'stopped', lastSeq: opts.after ?? 0, attempt: 0, retryAt: null, reason: '', downSince: null };
  }

  start(): void {
    if (this.state.status !== 'stopped') return;
    this.connect();
  }

  stop(): void {
    this.clearTimers();
    this.flush();
    const s = this.socket;
    this.socket = null;
    if (s) {
      s.onopen = s.onmessage = s.onclose = s.onerror = null;
      s.close(1000, 'bye');
    }
    this.setState({ status: 'stopped', retryAt: null });
  }

  /** Reconnect now (e.g. the operator clicked "retry"), keeping the resume point. */
  reconnectNow(): void {
    if (this.state.status === 'stopped') return;
    this.dropSocket('manual reconnect');
    this.clearTimers();
    this.connect();
  }

  private setState(patch: Partial<LiveState>) {
    const next = { ...this.state, ...patch };
    if (next.status === 'open' || next.status === 'stopped') next.downSince = null;
    else next.downSince ??= this.opts.timers.now();
    this.state = next;
    this.opts.onState?.(this.state);
  }

  private clearTimers() {
    const t = this.opts.timers;
    if (this.retryTimer !== null) t.clearTimeout(this.retryTimer);
    if (this.staleTimer !== null) t.clearTimeout(this.staleTimer);
    if (this.flushTimer !== null) t.clearTimeout(this.flushTimer);
    this.clearOpenTimer();
    this.retryTimer = this.staleTimer = this.flushTimer = null;
  }

  private clearOpenTimer() {
    if (this.openTimer !== null) this.opts.timers.clearTimeout(this.openTimer);
    this.openTimer = null;
  }

  private connect() {
    this.retryTimer = null;
    this.gotFrame = false;
    this.setState({ status: 'connecting', retryAt: null });
    let s: SocketLike;
    try {
      s = this.opts.createSocket(connectUrl(this.opts.url, this.state.lastSeq, this.opts.session));
    } catch (err) {
      this.scheduleRetry(err instanceof Error ? err.message : 'cannot open websocket');
      return;
    }
    this.socket = s;
    // A connection the guardian accepts but never answers would stay "connecting" for ever.
    const limit = this.opts.openTimeoutMs;
    this.clearOpenTimer();
    this.openTimer = this.opts.timers.setTimeout(() => {
      this.openTimer = null;
      if (this.socket !== s) return;
      const why = `no answer from the guardian in ${Math.round(limit / 1000)} s`;
      this.dropSocket(why);
      this.scheduleRetry(why);
    }, limit);
    s.onopen = () => {
      if (this.socket !== s) return;
      this.clearOpenTimer();
      this.setState({ status: 'open', reason: '' });
      this.armStale();
    };
    s.onmessage = (ev) => {
      if (this.socket !== s) return;
      if (!this.gotFrame) {
        // A frame proves the connection works end to end: only now forget earlier failures.
        this.gotFrame = true;
        if (this.state.attempt !== 0) this.setState({ attempt: 0 });
      }
      this.armStale();
      const e = parseFrame(ev.data);
      if (e) this.enqueue(e);
    };
    s.onerror = () => {
      /* onclose follows and decides */
    };
    s.onclose = (ev) => {
      if (this.socket !== s) return;
      this.clearOpenTimer();
      this.socket = null;
      this.flush();
      this.scheduleRetry(ev.reason || (ev.code ? `closed (${ev.code})` : 'connection lost'));
    };
  }

  /** Events are delivered in small batches so a burst becomes one UI update. */
  private enqueue(e: LiveEvent) {
    this.pending.push(e);
    if (this.flushTimer === null) this.flushTimer = this.opts.timers.setTimeout(() => this.flush(), this.opts.batchMs);
  }

  private flush() {
    if (this.flushTimer !== null) this.opts.timers.clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    const { fresh, lastSeq } = dedupe(batch, this.state.lastSeq);
    if (lastSeq !== this.state.lastSeq) this.setState({ lastSeq });
    if (fresh.length) this.opts.onEvents(fresh);
  }

  private armStale() {
    const t = this.opts.timers;
    if (this.staleTimer !== null) t.clearTimeout(this.staleTimer);
    this.staleTimer = t.setTimeout(() => {
      this.staleTimer = null;
      this.dropSocket('no data from the guardian');
      this.scheduleRetry('no data from the guardian');
    }, this.opts.staleMs);
  }

  private dropSocket(reason: string) {
    const s = this.socket;
    this.socket = null;
    if (!s) return;
    this.flush();
    s.onopen = s.onmessage = s.onclose = s.onerror = null;
    try {
      s.close(4000, reason);
    } catch {
      /* already closed */
    }
  }

  private scheduleRetry(reason: string) {
    const t = this.opts.timers;
    if (this.staleTimer !== null) t.clearTimeout(this.staleTimer);
    this.staleTimer = null;
    this.clearOpenTimer();
    const attempt = this.state.attempt + 1;
    const delay = backoffDelay(attempt, this.opts.minDelayMs, this.opts.maxDelayMs, this.opts.random);
    this.setState({ status: 'waiting', attempt, retryAt: t.now() + delay, reason });
    this.retryTimer = t.setTimeout(() => this.connect(), delay);
  }
}
