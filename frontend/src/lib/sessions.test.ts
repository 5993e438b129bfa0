import { describe, expect, it } from 'vitest';
import { applyEvents, applyStep, emptySessions, heldOnlySessions, matchesFilter, mergePage, peerLabel, pushCapped } from './sessions';
import type { Hold, LiveEvent, Session, Step } from './types';

const step = (seq: number, sessionId: string, decision = 'allow', extra: Partial<Step> = {}): Step => ({
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
  ...extra,
});
const stepEv = (s: Step): LiveEvent => ({ seq: s.seq, type: 'step', sessionId: s.sessionId, at: s.receivedAt, payload: s });
const sess = (id: string, lastSeq: number, steps = 1): Session => ({
  id,
  firstSeen: '2025-01-01T00:00:00Z',
  lastSeen: '2025-01-01T00:00:00Z',
  lastSeq,
  steps,
  decisions: { allow: steps },
  control: 'active',
});

describe('applyStep', () => {
  it('counts a new step and ignores one it has already counted', () => {
    const a = applyStep(undefined, step(1, 's', 'allow', { agentName: 'bot', userId: 'u' }));
    const b = applyStep(a, step(2, 's', 'deny'));
    expect(b).toMatchObject({ steps: 2, lastSeq: 2, decisions: { allow: 1, deny: 1 }, agentName: 'bot', userId: 'u' });
    expect(applyStep(b, step(2, 's', 'deny'))).toBe(b);
    expect(applyStep(b, step(1, 's'))).toBe(b);
  });
});

describe('MCP client and server', () => {
  it('keeps the newest client and server a step names, and keeps them through steps that name none', () => {
    const a = applyStep(undefined, step(1, 'mcp', 'allow', { client: { name: 'claude-code', version: '2.1.0' }, server: { name: 'everything', version: '2.0.0' } }));
    expect(a.client).toEqual({ name: 'claude-code', version: '2.1.0' });
    const b = applyStep(a, step(2, 'mcp', 'deny'));
    expect(b.server).toEqual({ name: 'everything', version: '2.0.0' });
    const c = applyStep(b, step(3, 'mcp', 'allow', { server: { name: 'everything-next' } }));
    expect(c.server).toEqual({ name: 'everything-next' });
    expect(c.client).toEqual({ name: 'claude-code', version: '2.1.0' });
    expect(applyStep(undefined, step(1, 'plain')).server).toBeUndefined();
  });
  it('labels a peer with its version when it has one', () => {
    expect(peerLabel({ name: 'everything', version: '2.0.0' })).toBe('everything 2.0.0');
    expect(peerLabel({ name: 'everything' })).toBe('everything');
    expect(peerLabel(undefined)).toBe('');
  });
});

describe('session reducer', () => {
  it('orders by newest step and moves a session to the top when it steps', () => {
    let st = mergePage(emptySessions(), [sess('a', 30), sess('b', 20), sess('c', 10)], 'cur1');
    expect(st.order).toEqual(['a', 'b', 'c']);
    expect(st.next).toBe('cur1');
    st = applyEvents(st, [stepEv(step(31, 'c', 'deny'))]);
    expect(st.order).toEqual(['c', 'a', 'b']);
    expect(st.byId.get('c')).toMatchObject({ steps: 2, decisions: { allow: 1, deny: 1 } });
  });

  it('is idempotent when a page overlaps events already applied', () => {
    let st = applyEvents(emptySessions(), [stepEv(step(5, 'x')), stepEv(step(6, 'x'))]);
    expect(st.byId.get('x')?.steps).toBe(2);
    // The page was read before step 6 was stored: the fresher state wins.
    st = mergePage(st, [sess('x', 5, 1), sess('y', 3)], null);
    expect(st.byId.get('x')?.steps).toBe(2);
    expect(st.order).toEqual(['x', 'y']);
    // Replayed events are no-ops.
    const again = applyEvents(st, [stepEv(step(6, 'x'))]);
    expect(again).toBe(st);
  });

  it('appends an older page after the loaded ones', () => {
    let st = mergePage(emptySessions(), [sess('a', 9), sess('b', 8)], 'c1');
    st = mergePage(st, [sess('c', 7), sess('d', 6)], null);
    expect(st.order).toEqual(['a', 'b', 'c', 'd']);
    expect(st.next).toBeNull();
  });

  it('only lets new sessions in that the filter accepts', () => {
    const st = applyEvents(emptySessions(), [stepEv(step(1, 'keep-1')), stepEv(step(2, 'other'))], {
      accept: (s) => s.id.startsWith('keep'),
    });
    expect(st.order).toEqual(['keep-1']);
  });

  it('applies session controls to listed sessions', () => {
    let st = mergePage(emptySessions(), [sess('a', 1)], null);
    st = applyEvents(st, [{ seq: 2, type: 'session.control', at: '', payload: { sessionId: 'a', control: 'block' } }]);
    expect(st.byId.get('a')?.control).toBe('blocked');
    st = applyEvents(st, [{ seq: 3, type: 'session.control', at: '', payload: { sessionId: 'a', control: 'resume' } }]);
    expect(st.byId.get('a')?.control).toBe('active');
  });

  it('caps memory, dropping the oldest sessions and the cursor', () => {
    let st = mergePage(emptySessions(), [sess('a', 3), sess('b', 2), sess('c', 1)], 'more', 3);
    st = applyEvents(st, [stepEv(step(10, 'new'))], { max: 3 });
    expect(st.order).toEqual(['new', 'a', 'b']);
    expect(st.byId.has('c')).toBe(false);
    expect(st.truncated).toBe(true);
    expect(st.next).toBeNull();
  });

  it('handles 10,000 sessions and a burst of 1,000 events quickly', () => {
    const page = Array.from({ length: 10_000 }, (_, i) => sess(`s${i}`, 20_000 - i));
    let st = mergePage(emptySessions(), page, 'next');
    const events = Array.from({ length: 1000 }, (_, i) => stepEv(step(30_000 + i, `s${(i * 7) % 10_000}`)));
    const t0 = performance.now();
    st = applyEvents(st, events);
    const ms = performance.now() - t0;
    expect(st.order).toHaveLength(10_000);
    expect(st.order[0]).toBe(`s${(999 * 7) % 10_000}`);
    expect(ms).toBeLessThan(200);
  });
});

describe('matchesFilter', () => {
  const s = { ...sess('sess-42', 1), agentName: 'Billing bot', userId: 'alice', decisions: { allow: 3, deny: 1 } };
  it.each([
    [{ text: 'billing', decision: '', control: '' }, 0, true],
    [{ text: 'bob', decision: '', control: '' }, 0, false],
    [{ text: '', decision: 'deny', control: '' }, 0, true],
    [{ text: '', decision: 'modify', control: '' }, 0, false],
    [{ text: '', decision: 'held', control: '' }, 0, false],
    [{ text: '', decision: 'held', control: '' }, 2, true],
    [{ text: '', decision: '', control: 'paused' }, 0, false],
  ] as const)('%j holds=%i → %s', (f, holds, want) => {
    expect(matchesFilter(s, f, holds)).toBe(want);
  });
});

describe('pushCapped', () => {
  it('keeps the newest first and at most max', () => {
    expect(pushCapped([3, 2, 1], [4, 5], 4)).toEqual([5, 4, 3, 2]);
    expect(pushCapped([1], [2, 3, 4, 5, 6], 3)).toEqual([6, 5, 4]);
    const b = [1];
    expect(pushCapped(b, [], 3)).toBe(b);
  });
});

describe('heldOnlySessions', () => {
  const hold = (id: string, sessionId: string, createdAt: string, agent?: { id: string; name: string }): Hold =>
    ({
      id,
      seq: 0,
      sessionId,
      method: 'steps/toolCallRequest',
      request: { params: { context: { ...(agent ? { agent } : {}), user: { id: 'ann' } } } },
      createdAt,
      deadline: createdAt,
      status: 'pending',
    }) as Hold;
  it('lists a session that only its pending holds tell of, newest first, until it is known', () => {
    const pending = [
      hold('h1', 'only-held', '2025-01-01T00:00:01Z', { id: 'billing-bot', name: 'Billing bot' }),
      hold('h2', 'stored', '2025-01-01T00:00:02Z'),
      hold('h3', 'only-held', '2025-01-01T00:00:05Z'),
      hold('h4', 'other', '2025-01-01T00:00:03Z'),
    ];
    const got = heldOnlySessions(pending, (id) => id === 'stored');
    expect(got.map((s) => s.id)).toEqual(['only-held', 'other']);
    expect(got[0]).toMatchObject({
      agentId: 'billing-bot',
      agentName: 'Billing bot',
      userId: 'ann',
      steps: 0,
      pendingHolds: 2,
      firstSeen: '2025-01-01T00:00:01Z',
      lastSeen: '2025-01-01T00:00:05Z',
      heldOnly: true,
    });
    // It matches the Held filter, and the search by agent.
    expect(matchesFilter(got[0]!, { text: 'billing', decision: 'held', control: '' }, got[0]!.pendingHolds ?? 0)).toBe(true);
    expect(heldOnlySessions(pending, () => true)).toEqual([]);
  });
});
