import { describe, expect, it } from 'vitest';
import { LiveLoads, mergeNewestFirst, type LiveSource } from './liveload';
import { applyEvents, applySessionEvents, emptySessions, mergePage } from './sessions';
import { appendSteps } from './timeline';
import type { AuditEntry, LiveEvent, Session, Step } from './types';

const step = (seq: number, sessionId: string, decision = 'allow'): Step => ({
  seq,
  sessionId,
  method: 'steps/toolCallRequest',
  kind: 'toolCall',
  decision,
  receivedAt: new Date(1_700_000_000_000 + seq * 1000).toISOString(),
  request: {},
  response: {},
  matchedRules: [],
  latencyMicros: 100,
});
const stepEv = (s: Step): LiveEvent => ({ seq: s.seq, type: 'step', sessionId: s.sessionId, at: s.receivedAt, payload: s });
const stats = (): LiveEvent => ({ seq: 0, type: 'stats', at: '2025-01-01T00:00:00Z', payload: {} as never });
const sess = (id: string, lastSeq: number, steps: number): Session => ({
  id,
  firstSeen: '2025-01-01T00:00:00Z',
  lastSeen: '2025-01-01T00:00:00Z',
  lastSeq,
  steps,
  decisions: { allow: steps },
  control: 'active',
});
const entry = (id: number): AuditEntry => ({ id, seq: id * 10, at: '2025-01-01T00:00:00Z', type: 'comment', note: `c${id}` });

/** An answer the test resolves (or rejects) when it wants. */
function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((ok, bad) => {
    resolve = ok;
    reject = bad;
  });
  return { promise, resolve, reject };
}

class FakeSource implements LiveSource {
  subs = new Set<(events: LiveEvent[]) => void>();
  opens = new Set<() => void>();
  subscribe(fn: (events: LiveEvent[]) => void) {
    this.subs.add(fn);
    return () => void this.subs.delete(fn);
  }
  onLiveOpen(fn: () => void) {
    this.opens.add(fn);
    return () => void this.opens.delete(fn);
  }
  emit(events: LiveEvent[]) {
    for (const fn of this.subs) fn(events);
  }
  open() {
    for (const fn of this.opens) fn();
  }
}

describe('LiveLoads', () => {
  it('hands a load the live events that arrived while it was on its way, and only those', async () => {
    const loads = new LiveLoads();
    const a = step(1, 's'),
      b = step(2, 's'),
      c = step(3, 's');
    loads.record([stepEv(a)]); // before: the answer has it
    const answer = deferred<string>();
    let called = false;
    const t = loads.track(() => {
      called = true;
      return answer.promise;
    });
    expect(called).toBe(true); // the request is sent before track returns
    expect(loads.busy).toBe(true);
    loads.record([stepEv(b), stats()]);
    loads.record([stepEv(c)]);
    answer.resolve('page');
    const got = await t;
    expect(got).toEqual({ ok: true, value: 'page', arrived: [stepEv(b), stepEv(c)], reopened: false });
    expect(loads.busy).toBe(false);
    loads.record([stepEv(step(4, 's'))]); // after: not kept anywhere
    expect(got.arrived).toHaveLength(2);
  });

  it('keeps the events of a failed load too, and never rejects', async () => {
    const loads = new LiveLoads();
    const answer = deferred<string>();
    const t = loads.track(() => answer.promise);
    loads.record([stepEv(step(7, 's'))]);
    const err = Object.assign(new Error('no session'), { status: 404 });
    answer.reject(err);
    expect(await t).toEqual({ ok: false, error: err, arrived: [stepEv(step(7, 's'))], reopened: false });
  });

  it('gives each of two overlapping loads what arrived during its own flight', async () => {
    const loads = new LiveLoads();
    const first = deferred<number>();
    const second = deferred<number>();
    const t1 = loads.track(() => first.promise);
    loads.record([stepEv(step(1, 's'))]);
    const t2 = loads.track(() => second.promise);
    loads.record([stepEv(step(2, 's'))]);
    first.resolve(1);
    expect((await t1).arrived.map((e) => e.seq)).toEqual([1, 2]);
    loads.record([stepEv(step(3, 's'))]);
    second.resolve(2);
    expect((await t2).arrived.map((e) => e.seq)).toEqual([2, 3]);
  });

  it('follows a source: records each batch before the page sees it, reloads on every open, and stops', async () => {
    const src = new FakeSource();
    const loads = new LiveLoads();
    const seen: number[][] = [];
    let reloads = 0;
    const answer = deferred<null>();
    let t: ReturnType<typeof loads.track<null>> | undefined;
    const off = loads.follow(
      src,
      (events) => {
        // A load started by the page for this very batch does not count it as arrived later.
        seen.push(events.map((e) => e.seq));
        t ??= loads.track(() => answer.promise);
      },
      () => reloads++,
    );
    src.emit([stepEv(step(1, 's'))]);
    src.emit([stepEv(step(2, 's'))]);
    src.open();
    src.open();
    expect(seen).toEqual([[1], [2]]);
    expect(reloads).toBe(2);
    answer.resolve(null);
    expect((await t!).arrived.map((e) => e.seq)).toEqual([2]);
    off();
    src.emit([stepEv(step(3, 's'))]);
    src.open();
    expect(seen).toHaveLength(2);
    expect(reloads).toBe(2);
    expect(src.subs.size + src.opens.size).toBe(0);
  });

  it('tells a load that the stream opened while it was on its way', async () => {
    // Steps stored before the stream opened are in neither the (older) answer nor what arrived
    // live: the page must not take what arrived as everything after its answer.
    const src = new FakeSource();
    const loads = new LiveLoads();
    const reloads: Promise<unknown>[] = [];
    loads.follow(
      src,
      () => undefined,
      () => reloads.push(loads.track(() => Promise.resolve('again'))),
    );
    const first = deferred<string>();
    const t = loads.track(() => first.promise);
    src.open();
    src.emit([stepEv(step(9, 's'))]);
    first.resolve('page');
    expect(await t).toMatchObject({ ok: true, arrived: [stepEv(step(9, 's'))], reopened: true });
    // What loads once it is open is complete.
    expect(await reloads[0]).toMatchObject({ ok: true, value: 'again', reopened: false });
    const later = loads.track(() => Promise.resolve('later'));
    src.emit([stepEv(step(10, 's'))]);
    expect(await later).toMatchObject({ reopened: false });
  });
});

describe('an answer older than the live events that came while it was on its way', () => {
  // The defects these helpers fix: each page replaced what the stream had applied meanwhile
  // with the older answer (docs/console.md, beside the live connection).
  it('the session list counts every step once (Live page)', () => {
    // The page asked for the sessions; s1's first step (seq 5) came live before the answer,
    // which was taken earlier and does not have s1; s2's answer already counts seq 6.
    const live = [stepEv(step(5, 's1')), stepEv(step(6, 's2'))];
    const answer = [sess('s2', 6, 3)];
    let list = applyEvents(mergePage(emptySessions(), answer, null), live);
    expect(list.byId.get('s1')).toMatchObject({ steps: 1, decisions: { allow: 1 } });
    expect(list.byId.get('s2')).toMatchObject({ steps: 3, lastSeq: 6 });
    // The next 20 steps of s1 count on top: 21, as GET /api/sessions/s1 says.
    list = applyEvents(
      list,
      Array.from({ length: 20 }, (_, i) => stepEv(step(10 + i, 's1'))),
    );
    expect(list.byId.get('s1')).toMatchObject({ steps: 21, decisions: { allow: 21 } });
    expect(list.order).toEqual(['s1', 's2']);
  });

  it('a session header counts the steps its answer lacks, once (Session page)', () => {
    const arrived = [stepEv(step(11, 's')), stepEv(step(12, 'other')), stepEv(step(13, 's', 'deny'))];
    // The answer counts seq 11 already (it was taken after it), not seq 13.
    expect(applySessionEvents(sess('s', 11, 10), 's', arrived)).toMatchObject({ steps: 11, lastSeq: 13, decisions: { allow: 10, deny: 1 } });
    // Not stored when asked (404): the steps that came meanwhile are the session.
    expect(applySessionEvents(undefined, 's', arrived)).toMatchObject({ steps: 2, lastSeq: 13 });
    expect(applySessionEvents(undefined, 's', [stepEv(step(12, 'other'))])).toBeUndefined();
    // A control that came meanwhile is kept.
    const control: LiveEvent = { seq: 14, type: 'session.control', sessionId: 's', at: '', payload: { sessionId: 's', control: 'pause', operator: 'rita', note: '' } };
    expect(applySessionEvents(sess('s', 11, 10), 's', [control])?.control).toBe('paused');
  });

  it('a timeline appends the steps newer than its last page, once (Session page)', () => {
    const page = [step(1, 's'), step(2, 's')];
    const arrived = [step(2, 's'), step(3, 's'), step(4, 's')];
    expect(appendSteps(page, arrived).map((s) => s.seq)).toEqual([1, 2, 3, 4]);
  });

  it('the audit log keeps the entries that came live, once each, newest first (Audit page)', () => {
    const answer = [entry(5), entry(4)];
    const arrived = [entry(5), entry(6), entry(7)].reverse();
    expect(mergeNewestFirst(answer, arrived, (e) => Number(e.id)).map((e) => e.id)).toEqual([7, 6, 5, 4]);
    // A refresh merges its page into what is listed (older pages kept).
    const listed = [entry(6), entry(5), entry(4), entry(2), entry(1)];
    expect(mergeNewestFirst([entry(8), entry(6)], listed, (e) => Number(e.id)).map((e) => e.id)).toEqual([8, 6, 5, 4, 2, 1]);
    // The first list's copy is kept.
    const fresh = { ...entry(6), note: 'answer' };
    expect(mergeNewestFirst([fresh], listed, (e) => Number(e.id))[0]).toBe(fresh);
  });
});
