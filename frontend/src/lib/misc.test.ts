import { describe, expect, it } from 'vitest';
import { Api, ApiError, headerSafe, liveUrl, query, resolveApiBase } from './api';
import { auditDiffLabel, auditNote } from './audit';
import { compareSessions, opText, type CompareResult } from './compare';
import { stringifyExact } from './jsonnumber';
import { count, micros, plural, relTime, shortId, shortMethod } from './format';
import { parseParams } from './jsonedit';
import { loadOperator, saveOperator } from './operator';
import { href, parseHash, type Route } from './router';
import { appendSteps, holdTurn, replaceStep, timelineRows } from './timeline';
import type { Hold, Step } from './types';
import { nearEnd, scrollToReveal, visibleRange } from './virtual';

describe('router', () => {
  it.each<[string, Route]>([
    ['', { page: 'live' }],
    ['#/live', { page: 'live' }],
    ['#/session/a%2Fb?step=12', { page: 'session', id: 'a/b', step: 12 }],
    ['#/session/abc', { page: 'session', id: 'abc' }],
    ['#/held', { page: 'held' }],
    ['#/held?hold=h_abc', { page: 'held', hold: 'h_abc' }],
    ['#/rules/new', { page: 'rules', isNew: true }],
    ['#/rules/big-transfer', { page: 'rules', id: 'big-transfer' }],
    ['#/overview', { page: 'overview' }],
    ['#/audit?session=s1', { page: 'audit', sessionId: 's1' }],
    ['#/audit?session=s1&type=rule&operator=rita', { page: 'audit', sessionId: 's1', type: 'rule', operator: 'rita' }],
    ['#/search', { page: 'search', query: {} }],
    ['#/search?q=%22exact+phrase%22+pay&decision=held&tool=send_email&from=2025-06-01T12%3A00%3A00.000Z&junk=1', {
      page: 'search',
      query: { q: '"exact phrase" pay', decision: 'held', tool: 'send_email', from: '2025-06-01T12:00:00.000Z' },
    }],
    ['#/access', { page: 'access' }],
    // A hand-typed % that does not decode is taken literally, not thrown as "URI malformed".
    ['#/session/50%off', { page: 'session', id: '50%off' }],
    ['#/rules/100%25%zz', { page: 'rules', id: '100%25%zz' }],
    ['#/nowhere', { page: 'live' }],
  ])('%s', (hash, route) => {
    expect(parseHash(hash)).toEqual(route);
    if (hash.startsWith('#/') && hash !== '#/nowhere') expect(parseHash(href(route))).toEqual(route);
  });
});

describe('virtual list math', () => {
  it('renders the visible rows plus overscan', () => {
    expect(visibleRange(0, 400, 40, 1000, 5)).toEqual({ start: 0, end: 16, padTop: 0, padBottom: 984 * 40 });
    const r = visibleRange(4000, 400, 40, 1000, 5);
    expect(r.start).toBe(95);
    expect(r.end).toBe(116);
    expect(r.padTop + (r.end - r.start) * 40 + r.padBottom).toBe(40_000);
    expect(visibleRange(0, 400, 40, 0)).toEqual({ start: 0, end: 0, padTop: 0, padBottom: 0 });
    expect(visibleRange(1e9, 400, 40, 10).end).toBe(10);
  });
  it('reveals a row and detects the end', () => {
    expect(scrollToReveal(0, 100, 400, 40)).toBe(0);
    expect(scrollToReveal(20, 0, 400, 40)).toBe(440);
    expect(scrollToReveal(5, 0, 400, 40)).toBeNull();
    expect(nearEnd({ start: 0, end: 90, padTop: 0, padBottom: 0 }, 100, 20)).toBe(true);
    expect(nearEnd({ start: 0, end: 50, padTop: 0, padBottom: 0 }, 100, 20)).toBe(false);
  });
});

describe('timeline', () => {
  const st = (seq: number, turnId: string) => ({ seq, turnId, sessionId: 's', receivedAt: '' }) as Step;
  it('groups by turn id: a turn has one header however its steps interleave', () => {
    const rows = timelineRows([st(1, 't1'), st(2, 't1'), st(3, 't2'), st(4, 't1')]);
    expect(rows.map((r) => (r.type === 'turn' ? `T${r.number}` : r.type === 'step' ? r.step.seq : r.hold.id))).toEqual(['T1', 1, 2, 4, 'T2', 3]);
    expect(new Set(rows.map((r) => r.key)).size).toBe(rows.length);
  });
  it('puts a step decided after review back in its turn, where it was held', () => {
    // Turn t2's step 7 was held at :04 and stored once approved, after turn t3's steps:
    // it has the highest seq but arrived before them.
    const at = (seq: number, turnId: string, t: string) => ({ ...st(seq, turnId), receivedAt: `2025-01-01T00:00:${t}Z` }) as Step;
    const rows = timelineRows([at(1, 't1', '01'), at(2, 't2', '03'), at(3, 't2', '05'), at(4, 't3', '08'), at(5, 't3', '09'), at(7, 't2', '04')]);
    const seen = rows.map((r) => (r.type === 'turn' ? `T${r.number}:${r.turnId}` : r.type === 'step' ? r.step.seq : r.hold.id));
    expect(seen).toEqual(['T1:t1', 1, 'T2:t2', 2, 7, 3, 'T3:t3', 4, 5]);
    // The turn number a step row carries is its header's.
    expect(rows.find((r) => r.type === 'step' && r.step.seq === 7)).toMatchObject({ turnNumber: 2 });
  });
  it('orders a turn that only a later-stored held step began before the turns after it', () => {
    const at = (seq: number, turnId: string, t: string) => ({ ...st(seq, turnId), receivedAt: `2025-01-01T00:00:${t}Z` }) as Step;
    const rows = timelineRows([at(1, 't1', '01'), at(3, 't3', '06'), at(2, 't2', '04')]);
    expect(rows.map((r) => (r.type === 'turn' ? r.turnId : r.type === 'step' ? r.step.seq : ''))).toEqual(['t1', 1, 't2', 2, 't3', 3]);
  });
  it('places pending holds by the time they were held, in their turn', () => {
    const at = (seq: number, turnId: string, t: string) => ({ ...st(seq, turnId), receivedAt: t }) as Step;
    const hold = (id: string, t: string, turnId?: string) =>
      ({ id, createdAt: t, request: { params: turnId ? { context: { turnId } } : {} } }) as unknown as Hold;
    const rows = timelineRows(
      [at(1, 't1', '2025-01-01T00:00:01Z'), at(2, 't1', '2025-01-01T00:00:03Z'), at(3, 't2', '2025-01-01T00:00:05Z')],
      [hold('late', '2025-01-01T00:00:09Z', 't2'), hold('mid', '2025-01-01T00:00:02Z', 't1'), hold('other', '2025-01-01T00:00:04Z', 'tx')],
    );
    const seen = rows.map((r) => (r.type === 'turn' ? `T:${r.turnId}` : r.type === 'step' ? r.step.seq : r.hold.id));
    expect(seen).toEqual(['T:t1', 1, 'mid', 2, 'T:tx', 'other', 'T:t2', 3, 'late']);
    expect(holdTurn(hold('x', '', 't9'))).toBe('t9');
    expect(holdTurn({ request: null } as unknown as Hold)).toBe('');
  });
  it('appends only new steps', () => {
    const have = [st(1, 'a'), st(2, 'a')];
    expect(appendSteps(have, [st(2, 'a')])).toBe(have);
    expect(appendSteps(have, [st(4, 'a'), st(3, 'a')]).map((s) => s.seq)).toEqual([1, 2, 3, 4]);
  });
  it('replaces a truncated step by the whole one', () => {
    const have = [st(1, 'a'), { ...st(2, 'a'), truncated: true, request: null }];
    const full = { ...st(2, 'a'), request: { method: 'steps/message' } };
    const got = replaceStep(have, full);
    expect(got[1]).toBe(full);
    expect(got[0]).toBe(have[0]);
    expect(have[1]!.truncated).toBe(true);
    expect(replaceStep(have, st(9, 'a'))).toBe(have);
  });
});

describe('format', () => {
  it('formats', () => {
    expect(micros(850)).toBe('850 µs');
    expect(micros(1234)).toBe('1.2 ms');
    expect(micros(45_000)).toBe('45 ms');
    expect(micros(1_500_000)).toBe('1.50 s');
    expect(count(1234)).toBe('1,234');
    expect(count(1_234_567)).toBe('1.2M');
    expect(relTime(new Date(0).toISOString(), 30_000)).toBe('30 s ago');
    expect(relTime(undefined, 0)).toBe('—');
    expect(shortMethod('steps/toolCallRequest')).toBe('toolCallRequest');
    expect(shortId('0123456789abcdefghijklmnop', 11)).toBe('01234…lmnop');
  });
  it('says one step, not 1 steps', () => {
    expect(plural(1, 'step')).toBe('1 step');
    expect(plural(0, 'step')).toBe('0 steps');
    expect(plural(2, 'match', 'matches')).toBe('2 matches');
    expect(plural(1234, 'step')).toBe('1,234 steps');
    expect(plural(undefined, 'error')).toBe('0 errors');
  });
});

describe('parseParams', () => {
  it('accepts an object and reports errors with a position', () => {
    expect(parseParams('{"a": 1}')).toMatchObject({ ok: true, value: { a: 1 }, text: '{"a": 1}' });
    const bad = parseParams('{\n  "a": 1,\n  x\n}');
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect([bad.line, bad.column]).toEqual([3, 3]);
    const end = parseParams('{"a":');
    expect(end.ok).toBe(false);
    if (!end.ok) expect(end.line).toBe(1);
    expect(parseParams('[1]')).toMatchObject({ ok: false, message: 'Params must be a JSON object.' });
    expect(parseParams('  ')).toMatchObject({ ok: false });
  });
});

describe('operator', () => {
  it('remembers a trimmed name', () => {
    const m = new Map<string, string>();
    const kv = { getItem: (k: string) => m.get(k) ?? null, setItem: (k: string, v: string) => void m.set(k, v) };
    expect(loadOperator(kv)).toBe('');
    expect(saveOperator(kv, '  ann  ')).toBe('ann');
    expect(loadOperator(kv)).toBe('ann');
    expect(loadOperator(undefined)).toBe('');
  });
});

describe('api client', () => {
  it('builds queries without empty values', () => {
    expect(query({ a: 1, b: '', c: undefined, d: 'x y' })).toBe('?a=1&d=x+y');
    expect(query({})).toBe('');
  });

  it('resolves the API base and the live URL', () => {
    expect(resolveApiBase({ search: '' }, {})).toBe('');
    expect(resolveApiBase({ search: '?api=http://127.0.0.1:7878' }, {})).toBe('http://127.0.0.1:7878');
    expect(resolveApiBase({ search: '?api=javascript:alert(1)' }, {})).toBe('');
    expect(resolveApiBase({ search: '' }, { __VIGIL_API__: 'http://x' })).toBe('http://x');
    expect(liveUrl('', { protocol: 'https:', host: 'h:1' })).toBe('wss://h:1/api/live');
    expect(liveUrl('http://127.0.0.1:7878/', { protocol: 'wails:', host: 'w' })).toBe('ws://127.0.0.1:7878/api/live');
  });

  it('sends JSON and surfaces the server error message', async () => {
    const calls: { url: string; init?: RequestInit }[] = [];
    const api = new Api('http://g', async (url, init) => {
      calls.push({ url, init });
      if (url.endsWith('/modify')) {
        return new Response(JSON.stringify({ error: { code: 'invalid_params', message: 'params.context is required' } }), { status: 400 });
      }
      return new Response(JSON.stringify({ sessions: [], next: 'c2' }), { status: 200 });
    });
    await expect(api.sessions({ limit: 50, q: 'bot' })).resolves.toEqual({ sessions: [], next: 'c2' });
    expect(calls[0]!.url).toBe('http://g/api/sessions?limit=50&q=bot');
    const err = await api.decide('h 1', 'modify', { operator: 'ann', params: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 400, code: 'invalid_params', message: 'params.context is required' });
    expect(calls[1]!.url).toBe('http://g/api/holds/h%201/modify');
    expect(JSON.parse(String(calls[1]!.init?.body))).toEqual({ operator: 'ann', params: {} });
  });

  it('sends the operator and, in team mode, the CSRF token; reports 401', async () => {
    const seen: Headers[] = [];
    let unauth = 0;
    const api = new Api('', async (_url, init) => {
      seen.push(new Headers(init?.headers));
      return new Response(JSON.stringify({ error: { code: 'unauthenticated', message: 'sign in' } }), { status: 401 });
    });
    api.operator = 'Zoë';
    api.csrfToken = 'tok';
    api.onUnauthenticated = () => unauth++;
    await expect(api.rules()).rejects.toMatchObject({ status: 401 });
    await expect(api.setEnabled('r', true)).rejects.toMatchObject({ status: 401 });
    await expect(api.me()).rejects.toMatchObject({ status: 401 });
    expect(seen[0]!.get('X-Vigil-Operator')).toBe('Zo%C3%AB');
    expect(seen[0]!.get('X-CSRF-Token')).toBeNull(); // reads carry none
    expect(seen[1]!.get('X-CSRF-Token')).toBe('tok');
    expect(unauth).toBe(2); // /api/auth/me itself does not trigger the sign-in screen
    expect(headerSafe('Dana Reyes')).toBe('Dana Reyes');
  });

  it("reads the agent's numbers in steps, holds and audit entries as the guardian sent them", async () => {
    const big = '12345678901234567891'; // JSON.parse reads 12345678901234567000
    const request = `{"method":"steps/toolCallRequest","params":{"toolCallRequest":{"inputs":[{"name":"id","value":${big}}]}}}`;
    const answers: Record<string, string> = {
      '/api/holds?status=pending': `{"holds":[{"id":"h1","request":${request}}]}`,
      '/api/holds/h1/approve': `{"id":"h1","request":${request}}`,
      '/api/sessions/s/steps': `{"steps":[{"seq":1,"request":${request}}],"next":null}`,
      '/api/steps/1': `{"seq":1,"request":${request}}`,
      '/api/steps/1/hold': `{"hold":{"id":"h1","request":${request}},"audit":[{"id":2,"diff":[{"op":"replace","value":${big}}]}]}`,
      '/api/audit': `{"entries":[{"id":2,"detail":{"n":${big}}}]}`,
      '/api/compare?a=x&b=y': `{"rows":[{"inputs":[{"op":"add","path":"/0","value":${big}}]}]}`,
    };
    const api = new Api('', async (url) => new Response(answers[url] ?? '{}', { status: answers[url] ? 200 : 404 }));
    const got = [
      await api.holds(),
      await api.decide('h1', 'approve', { operator: 'ann' }),
      await api.sessionSteps('s'),
      await api.step(1),
      await api.stepHold(1),
      await api.audit(),
      await compareSessions(api, 'x', 'y'),
    ];
    for (const v of got) expect(stringifyExact(v)).toContain(big);
    expect(opText((got[6] as CompareResult).rows![0]!.inputs![0]!)).toBe(`/0: added ${big}`);
    expect((got[2] as { steps: Step[] }).steps[0]!.seq).toBe(1); // the guardian's own numbers stay numbers
  });

  it('reports network failures and non-JSON errors readably', async () => {
    const down = new Api('', async () => {
      throw new TypeError('Failed to fetch');
    });
    await expect(down.info()).rejects.toMatchObject({ code: 'network' });
    const proxy = new Api('', async () => new Response('Bad Gateway', { status: 502 }));
    await expect(proxy.info()).rejects.toMatchObject({ status: 502, message: 'Bad Gateway' });
  });
});

describe('audit note', () => {
  const patch = [{ op: 'replace', path: '/toolCallRequest/inputs/0/value', value: 50, old: 5000 }];
  it('says "params edited" only for a hold approved with edited params', () => {
    expect(auditNote({ type: 'hold.modified', diff: patch })).toBe('params edited');
    expect(auditNote({ type: 'hold.modified', diff: patch, note: 'capped' })).toBe('capped');
    // A rule change's diff is the rule's, not a step's params.
    for (const type of ['rule.import', 'rule.update', 'rule.create', 'rule.revert']) expect(auditNote({ type, diff: [{ op: 'add', path: '/x', value: 1 }] })).toBe('');
    // A plain approval's diff is the rules' own modifications.
    expect(auditNote({ type: 'hold.approved', diff: patch })).toBe("rules' modifications applied");
    expect(auditNote({ type: 'hold.modified', diff: [] })).toBe('');
    expect(auditNote({ type: 'hold.denied' })).toBe('');
    expect(auditDiffLabel('rule.import')).toBe('Change to the rule');
    expect(auditDiffLabel('hold.modified')).toBe('Params edited by the operator');
  });
});
