import { describe, expect, it } from 'vitest';
import {
  ClockOffset,
  applyHoldEvents,
  emptyHolds,
  formatCountdown,
  holdsBySession,
  PendingLoads,
  type HoldsState,
  type PendingPage,
  remainingFraction,
  remainingMs,
  setPending,
  urgency,
} from './holds';
import type { Hold, LiveEvent } from './types';

const hold = (id: string, createdSec: number, extra: Partial<Hold> = {}): Hold => ({
  id,
  seq: 0,
  sessionId: 's1',
  method: 'steps/toolCallRequest',
  request: {},
  createdAt: new Date(createdSec * 1000).toISOString(),
  deadline: new Date((createdSec + 120) * 1000).toISOString(),
  status: 'pending',
  ...extra,
});
const ev = (type: 'hold.created' | 'hold.resolved', h: Hold): LiveEvent => ({ seq: 1, type, at: '', payload: h });

/** An answer the test gives when it wants. */
function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((ok, bad) => {
    resolve = ok;
    reject = bad;
  });
  return { promise, resolve, reject };
}

describe('loads of the pending queue', () => {
  /** The queue as the console keeps it, loaded as refreshHolds does. */
  function queue(initial: Hold[]) {
    let state: HoldsState = { pending: initial, recent: [] };
    const loads = new PendingLoads();
    const load = (answer: Promise<PendingPage>) =>
      loads.run(() => state, () => answer).then((r) => {
        if (r) state = r.state;
        return r;
      });
    return { loads, load, ids: () => state.pending.map((h) => h.id), live: (e: LiveEvent[]) => (state = applyHoldEvents(state, e)) };
  }

  it('never lets an older answer replace a newer one', async () => {
    // x was decided while the stream was down (its hold.resolved never came): the load the
    // stream's opening starts knows it, the load on its way from before still lists it.
    const q = queue([hold('x', 10)]);
    const older = deferred<PendingPage>(),
      newer = deferred<PendingPage>();
    const a = q.load(older.promise);
    const b = q.load(newer.promise);
    newer.resolve({ holds: [hold('y', 20)] });
    expect(await b).not.toBeNull();
    expect(q.ids()).toEqual(['y']);
    older.resolve({ holds: [hold('x', 10)] });
    expect(await a).toBeNull();
    expect(q.ids()).toEqual(['y']);
  });

  it('takes an older answer that comes first, then the newer one', async () => {
    const q = queue([]);
    const older = deferred<PendingPage>(),
      newer = deferred<PendingPage>();
    const a = q.load(older.promise);
    const b = q.load(newer.promise);
    expect(q.loads.busy).toBe(true);
    older.resolve({ holds: [hold('x', 10)], now: '2025-01-01T00:00:00Z' });
    expect(await a).toMatchObject({ now: '2025-01-01T00:00:00Z' });
    expect(q.ids()).toEqual(['x']);
    q.live([ev('hold.created', hold('z', 30))]); // arrived live while the newer load was on its way
    newer.resolve({ holds: [hold('y', 20)] });
    await b;
    expect(q.ids()).toEqual(['y', 'z']);
    expect(q.loads.busy).toBe(false);
  });

  it("leaves an older load's failure to the newer load", async () => {
    const q = queue([hold('x', 10)]);
    const older = deferred<PendingPage>(),
      newer = deferred<PendingPage>();
    const a = q.load(older.promise);
    const b = q.load(newer.promise);
    older.reject(new Error('network'));
    await expect(a).resolves.toBeNull();
    newer.reject(new Error('down'));
    await expect(b).rejects.toThrow('down');
    expect(q.ids()).toEqual(['x']);
  });
});

describe('holds reducer', () => {
  it('keeps pending oldest first and moves resolved ones to recent', () => {
    let st = applyHoldEvents(emptyHolds(), [ev('hold.created', hold('b', 20)), ev('hold.created', hold('a', 10))]);
    expect(st.pending.map((h) => h.id)).toEqual(['a', 'b']);
    st = applyHoldEvents(st, [ev('hold.resolved', hold('a', 10, { status: 'approved', decidedBy: 'ann' }))]);
    expect(st.pending.map((h) => h.id)).toEqual(['b']);
    expect(st.recent[0]).toMatchObject({ id: 'a', status: 'approved' });
  });

  it('ignores a duplicate create and a create after the resolution', () => {
    let st = applyHoldEvents(emptyHolds(), [ev('hold.created', hold('a', 10)), ev('hold.created', hold('a', 10))]);
    expect(st.pending).toHaveLength(1);
    st = applyHoldEvents(st, [ev('hold.resolved', hold('a', 10, { status: 'denied' })), ev('hold.created', hold('a', 10))]);
    expect(st.pending).toHaveLength(0);
  });

  it('a snapshot does not bring back a hold already resolved live', () => {
    let st = applyHoldEvents(emptyHolds(), [ev('hold.resolved', hold('a', 10, { status: 'timedOut' }))]);
    st = setPending(st, [hold('a', 10), hold('c', 5)]);
    expect(st.pending.map((h) => h.id)).toEqual(['c']);
  });

  it('a snapshot requested before a hold arrived live does not drop it', () => {
    // The page asked for the queue (a and b pending), then b was resolved and c held, live,
    // before the answer, taken earlier, came back with a and b.
    let st = applyHoldEvents(emptyHolds(), [ev('hold.created', hold('a', 10)), ev('hold.created', hold('b', 20))]);
    const before = new Set(st.pending.map((h) => h.id));
    st = applyHoldEvents(st, [ev('hold.resolved', hold('b', 20, { status: 'denied' })), ev('hold.created', hold('c', 30))]);
    st = setPending(st, [hold('a', 10), hold('b', 20)], before);
    expect(st.pending.map((h) => h.id)).toEqual(['a', 'c']);
    // A hold pending before the request and gone from its answer was resolved meanwhile.
    st = setPending(st, [hold('c', 30)], new Set(['a', 'c']));
    expect(st.pending.map((h) => h.id)).toEqual(['c']);
  });

  it('counts pending holds per session', () => {
    const m = holdsBySession([hold('a', 1), hold('b', 2, { sessionId: 's2' }), hold('c', 3)]);
    expect(m.get('s1')).toBe(2);
    expect(m.get('s2')).toBe(1);
  });
});

describe('countdown math', () => {
  const created = '2025-01-01T00:00:00Z';
  const deadline = '2025-01-01T00:02:00Z';
  const t = (s: number) => Date.parse(created) + s * 1000;
  it('remaining time and fraction', () => {
    expect(remainingMs(deadline, t(30))).toBe(90_000);
    expect(remainingMs(deadline, t(500))).toBe(0);
    expect(remainingFraction(created, deadline, t(30))).toBeCloseTo(0.75);
    expect(remainingFraction(created, deadline, t(-10))).toBe(1);
    expect(remainingFraction(created, created, t(0))).toBe(0);
    expect(remainingMs('garbage', t(0))).toBe(0);
    expect(remainingMs(deadline, t(-5), created)).toBe(120_000);
    expect(remainingMs(deadline, t(-5))).toBe(125_000);
  });
  it.each([
    [0, '0:00'],
    [1, '0:01'],
    [999, '0:01'],
    [65_000, '1:05'],
    [3_723_000, '1:02:03'],
  ])('formats %i ms as %s', (ms, want) => expect(formatCountdown(ms)).toBe(want));
  it.each([
    [0, 0, 'expired'],
    [10_000, 0.9, 'urgent'],
    [100_000, 0.1, 'urgent'],
    [45_000, 0.9, 'soon'],
    [100_000, 0.4, 'soon'],
    [100_000, 0.8, 'calm'],
  ] as const)('urgency(%i, %f) = %s', (ms, f, want) => expect(urgency(ms, f)).toBe(want));
});

describe('ClockOffset', () => {
  it('takes the largest recent sample: events are stamped before they arrive', () => {
    const c = new ClockOffset(3);
    expect(c.offset).toBe(0);
    const local = 1_000_000;
    c.observe(new Date(local + 5000 - 40).toISOString(), local); // server 5 s ahead, 40 ms in flight
    c.observe(new Date(local + 5000 - 300).toISOString(), local);
    expect(c.offset).toBe(4960);
    expect(c.serverNow(local)).toBe(local + 4960);
    c.observe('not a date', local);
    c.observe(new Date(local - 100).toISOString(), local);
    c.observe(new Date(local - 100).toISOString(), local);
    c.observe(new Date(local - 100).toISOString(), local);
    expect(c.offset).toBe(-100); // old samples roll off
  });
});

describe('a resolved hold keeps its request', () => {
  it('takes the request from the pending hold when the event leaves it out', () => {
    const pendingHold = { ...hold('a', 10), request: { method: 'steps/toolCallRequest', params: { toolCallRequest: { toolId: 'quick_transfer' } } } };
    let st = applyHoldEvents(emptyHolds(), [ev('hold.created', pendingHold)]);
    st = applyHoldEvents(st, [ev('hold.resolved', { ...hold('a', 10, { status: 'timedOut' }), request: null })]);
    expect(st.pending).toEqual([]);
    expect(st.recent[0]?.status).toBe('timedOut');
    expect(st.recent[0]?.request).toEqual(pendingHold.request);
  });
});
