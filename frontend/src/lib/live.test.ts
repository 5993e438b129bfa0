import { describe, expect, it } from 'vitest';
import { LiveClient, backoffDelay, connectUrl, dedupe, parseFrame, type SocketLike, type Timers } from './live';
import { stringifyExact } from './jsonnumber';
import type { LiveEvent } from './types';

class FakeSocket implements SocketLike {
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code?: number; reason?: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  closed = false;
  constructor(readonly url: string) {}
  close() {
    this.closed = true;
  }
  open() {
    this.onopen?.({});
  }
  send(e: Partial<LiveEvent> & { seq: number; type: string }) {
    this.onmessage?.({ data: JSON.stringify({ at: '2025-01-01T00:00:00Z', payload: {}, ...e }) });
  }
  drop(code = 1006) {
    this.onclose?.({ code });
  }
}

class FakeTimers implements Timers {
  t = 0;
  private q: { at: number; fn: () => void; id: number }[] = [];
  private id = 0;
  now() {
    return this.t;
  }
  setTimeout(fn: () => void, ms: number) {
    const id = ++this.id;
    this.q.push({ at: this.t + ms, fn, id });
    return id;
  }
  clearTimeout(h: unknown) {
    this.q = this.q.filter((x) => x.id !== h);
  }
  advance(ms: number) {
    const end = this.t + ms;
    for (;;) {
      this.q.sort((a, b) => a.at - b.at);
      const next = this.q[0];
      if (!next || next.at > end) break;
      this.q.shift();
      this.t = next.at;
      next.fn();
    }
    this.t = end;
  }
}

function setup(opts: { session?: string } = {}) {
  const sockets: FakeSocket[] = [];
  const timers = new FakeTimers();
  const got: LiveEvent[] = [];
  const client = new LiveClient({
    url: 'ws://h/api/live',
    ...opts,
    onEvents: (es) => got.push(...es),
    createSocket: (u) => {
      const s = new FakeSocket(u);
      sockets.push(s);
      return s;
    },
    timers,
    random: () => 1, // no jitter: full delay
    minDelayMs: 500,
    maxDelayMs: 8000,
    staleMs: 20_000,
    batchMs: 50,
  });
  return { sockets, timers, got, client };
}

describe('backoffDelay', () => {
  it('doubles per attempt up to the cap, with jitter between 50 and 100 %', () => {
    expect([1, 2, 3, 4, 5, 6, 10].map((a) => backoffDelay(a, 500, 8000, () => 1))).toEqual([500, 1000, 2000, 4000, 8000, 8000, 8000]);
    expect(backoffDelay(3, 500, 8000, () => 0)).toBe(1000);
  });
});

describe('connectUrl', () => {
  it.each([
    [0, undefined, 'ws://h/api/live'],
    [42, undefined, 'ws://h/api/live?after=42'],
    [42, 's 1', 'ws://h/api/live?after=42&session=s+1'],
    [0, 's1', 'ws://h/api/live?session=s1'],
  ])('after=%s session=%s', (after, session, want) => {
    expect(connectUrl('ws://h/api/live', after, session)).toBe(want);
  });
});

describe('parseFrame and dedupe', () => {
  it('rejects non-events', () => {
    expect(parseFrame('nope')).toBeNull();
    expect(parseFrame('{"type":"step"}')).toBeNull();
    expect(parseFrame(new ArrayBuffer(2))).toBeNull();
    expect(parseFrame('{"seq":1,"type":"step","payload":{}}')?.seq).toBe(1);
  });
  it("keeps the digits of an agent's numbers", () => {
    const e = parseFrame('{"seq":3,"type":"hold.created","payload":{"request":{"params":{"n":12345678901234567891}}}}');
    expect(e?.seq).toBe(3);
    expect(stringifyExact(e?.payload)).toBe('{"request":{"params":{"n":12345678901234567891}}}');
  });
  it('drops seen seqs, keeps stats (seq 0) and order', () => {
    const ev = (seq: number, type = 'step') => ({ seq, type, at: '', payload: {} }) as unknown as LiveEvent;
    const { fresh, lastSeq } = dedupe([ev(3), ev(5), ev(0, 'stats'), ev(5), ev(4), ev(6)], 4);
    expect(fresh.map((e) => e.seq)).toEqual([5, 0, 6]);
    expect(lastSeq).toBe(6);
  });
});

describe('LiveClient', () => {
  it('delivers events in batches and resumes after the last seq with backoff', () => {
    const { sockets, timers, got, client } = setup();
    const states: string[] = [];
    client.start();
    expect(sockets[0]!.url).toBe('ws://h/api/live');
    sockets[0]!.open();
    sockets[0]!.send({ seq: 1, type: 'step' });
    sockets[0]!.send({ seq: 2, type: 'step' });
    expect(got).toHaveLength(0); // batched
    timers.advance(60);
    expect(got.map((e) => e.seq)).toEqual([1, 2]);

    sockets[0]!.drop();
    expect(client.state.status).toBe('waiting');
    expect(client.state.retryAt).toBe(timers.t + 500);
    timers.advance(499);
    expect(sockets).toHaveLength(1);
    timers.advance(1);
    expect(sockets[1]!.url).toBe('ws://h/api/live?after=2');

    // Fails again before any frame: the delay doubles.
    sockets[1]!.drop();
    timers.advance(999);
    expect(sockets).toHaveLength(2);
    timers.advance(1);
    expect(sockets).toHaveLength(3);
    sockets[2]!.open();
    // Replayed duplicates are dropped, new ones pass.
    sockets[2]!.send({ seq: 2, type: 'step' });
    sockets[2]!.send({ seq: 3, type: 'hold.created' });
    timers.advance(60);
    expect(got.map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(client.state.attempt).toBe(0);
    // After a good connection the next failure starts from the minimum delay again.
    sockets[2]!.drop();
    expect(client.state.retryAt).toBe(timers.t + 500);
    void states;
    client.stop();
  });

  it('flushes pending events when the socket closes', () => {
    const { sockets, got, client } = setup();
    client.start();
    sockets[0]!.open();
    sockets[0]!.send({ seq: 7, type: 'step' });
    sockets[0]!.drop();
    expect(got.map((e) => e.seq)).toEqual([7]);
    expect(client.state.lastSeq).toBe(7);
    client.stop();
  });

  it('reconnects a connection that went silent', () => {
    const { sockets, timers, client } = setup({ session: 'abc' });
    client.start();
    sockets[0]!.open();
    sockets[0]!.send({ seq: 9, type: 'step' });
    timers.advance(19_999);
    expect(sockets[0]!.closed).toBe(false);
    timers.advance(1);
    expect(sockets[0]!.closed).toBe(true);
    expect(client.state.status).toBe('waiting');
    timers.advance(500);
    expect(sockets[1]!.url).toBe('ws://h/api/live?after=9&session=abc');
  });

  it('abandons an attempt that does not open in time and retries with backoff', () => {
    // A guardian that accepts the connection but never answers (stopped, SIGSTOP): the
    // attempt must not stay "connecting" for ever.
    const { sockets, timers, client } = setup();
    client.start();
    sockets[0]!.open();
    sockets[0]!.send({ seq: 4, type: 'step' });
    expect(client.state.downSince).toBeNull();
    timers.advance(20_000); // silent: dropped
    const down = timers.t;
    expect(client.state.status).toBe('waiting');
    expect(client.state.downSince).toBe(down);
    timers.advance(500);
    expect(sockets).toHaveLength(2);
    expect(client.state.status).toBe('connecting');
    timers.advance(9_999);
    expect(client.state.status).toBe('connecting');
    expect(sockets[1]!.closed).toBe(false);
    timers.advance(1);
    expect(sockets[1]!.closed).toBe(true);
    expect(client.state.status).toBe('waiting');
    expect(client.state.reason).toBe('no answer from the guardian in 10 s');
    expect(client.state.attempt).toBe(2);
    expect(client.state.retryAt).toBe(timers.t + 1000);
    // Still down since the drop, across attempts.
    expect(client.state.downSince).toBe(down);
    timers.advance(1000);
    expect(sockets).toHaveLength(3);
    expect(sockets[2]!.url).toBe('ws://h/api/live?after=4');
    // An attempt that opens in time is kept, and the stream is up again.
    timers.advance(3000);
    sockets[2]!.open();
    timers.advance(9000);
    expect(sockets[2]!.closed).toBe(false);
    expect(client.state.status).toBe('open');
    expect(client.state.downSince).toBeNull();
    client.stop();
  });

  it('counts the first connection as down until it opens', () => {
    const { sockets, timers, client } = setup();
    timers.advance(1234);
    client.start();
    expect(client.state.downSince).toBe(1234);
    sockets[0]!.open();
    expect(client.state.downSince).toBeNull();
    client.stop();
    expect(client.state.downSince).toBeNull();
  });

  it('stop closes the socket and schedules nothing', () => {
    const { sockets, timers, client } = setup();
    client.start();
    sockets[0]!.open();
    client.stop();
    expect(sockets[0]!.closed).toBe(true);
    expect(client.state.status).toBe('stopped');
    timers.advance(60_000);
    expect(sockets).toHaveLength(1);
  });
});
