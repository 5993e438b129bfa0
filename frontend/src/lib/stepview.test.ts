import { describe, expect, it } from 'vitest';
import { JsonNumber } from './jsonnumber';
import { answerOf, changesOf, controlReason, heldOutcome, kindOf, partsText, readable, redactionsOf, valueText } from './stepview';

const ctx = {
  agent: { id: 'a1', name: 'Billing bot' },
  session: { id: 's1' },
  turnId: 't1',
  stepId: 'st1',
  timestamp: '2025-01-01T00:00:00Z',
  user: { id: 'u1', name: 'Alice', organization: { id: 'o' } },
};

describe('readable', () => {
  it('renders a tool call with its inputs and reasoning', () => {
    const r = readable({
      jsonrpc: '2.0',
      id: 1,
      method: 'steps/toolCallRequest',
      params: {
        context: ctx,
        reasoning: 'pay the invoice',
        toolCallRequest: { executionId: 'e1', toolId: 'transfer_funds', inputs: [{ name: 'amount', value: 5000 }, { name: 'to', value: 'ACME' }] },
      },
    });
    expect(r).toMatchObject({
      title: 'Tool call · transfer_funds',
      tool: 'transfer_funds',
      inputs: [
        { name: 'amount', value: 5000 },
        { name: 'to', value: 'ACME' },
      ],
      reasoning: 'pay the invoice',
      agent: 'Billing bot',
      user: 'Alice',
      turnId: 't1',
    });
  });

  it('renders a message with text, files and data parts', () => {
    const r = readable({
      method: 'steps/message',
      params: {
        context: ctx,
        message: {
          id: 'm',
          role: 'user',
          content: [
            { kind: 'text', text: 'hello' },
            { kind: 'file', file: { name: 'r.pdf', uri: 'https://x/r.pdf' } },
          ],
        },
        citations: [{ kind: 'site', url: 'https://example.com' }],
      },
    });
    expect(r.title).toBe('Message from user');
    expect(r.sections).toEqual([
      { label: 'Text', text: 'hello\n[file r.pdf]' },
      { label: 'Citations', text: 'https://example.com' },
    ]);
  });

  it('accepts both toolCallResult shapes (ERRATA 4)', () => {
    const flat = readable({ method: 'steps/toolCallResult', params: { executionId: 'e', result: { outputs: [{ kind: 'text', text: 'boom' }], isError: true } } });
    const nested = readable({ method: 'steps/toolCallResult', params: { toolCallResult: { executionId: 'e', result: { outputs: [{ kind: 'text', text: 'boom' }], isError: true } } } });
    for (const r of [flat, nested]) {
      expect(r.isError).toBe(true);
      expect(r.sections).toEqual([{ label: 'Error output', text: 'boom' }]);
      expect(r.subtitle).toBe('execution e');
    }
  });

  it('accepts MCP messages inline or under message (ERRATA 3)', () => {
    const call = { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'read_file', arguments: { path: '/etc/passwd' } } };
    for (const params of [call, { message: call }]) {
      const r = readable({ method: 'protocols/MCP', params });
      expect(r.tool).toBe('read_file');
      expect(r.title).toBe('MCP tools/call · read_file');
      expect(r.inputs).toEqual([{ name: 'path', value: '/etc/passwd' }]);
    }
    expect(readable({ method: 'protocols/MCP', params: { jsonrpc: '2.0', id: 4, method: 'tools/list' } }).title).toBe('MCP tools/list');
    const res = readable({ method: 'protocols/MCP', params: { message: { jsonrpc: '2.0', id: 3, result: { content: [{ type: 'text', text: 'root:x:0' }] } } } });
    expect(res.title).toBe('MCP response to #3');
    expect(res.sections).toEqual([{ label: 'Result', text: 'root:x:0' }]);
  });

  it('renders knowledge results and memory', () => {
    const k = readable({ method: 'steps/knowledgeRetrieval', params: { context: ctx, knowledgeStep: { query: 'q', results: [{ id: 'doc', content: 'c' }] } } });
    expect(k.sections).toEqual([
      { label: 'Query', text: 'q' },
      { label: 'Result 1 · doc', text: 'c' },
    ]);
    const m = readable({ method: 'steps/memoryStore', params: { context: ctx, memory: ['a', 'b'] } });
    expect(m.sections.map((s) => s.text)).toEqual(['a', 'b']);
  });

  it('renders native A2A methods (ERRATA 7)', () => {
    const r = readable({ method: 'message/send', params: { payload: { message: { role: 'user', parts: [{ kind: 'text', text: 'hi' }] } } } });
    expect(r.sections).toEqual([{ label: 'Message', text: 'hi' }]);
    expect(r.title).toBe('A2A message/send');
    expect(kindOf('tasks/get')).toBe('a2a');
    const peers = readable({
      method: 'message/send',
      params: { context: { from: { name: 'planner' }, to: 'researcher' }, payload: { message: { role: 'agent', parts: [{ kind: 'text', text: 'find it' }] } } },
    });
    expect(peers.title).toBe('A2A message/send · planner → researcher');
    expect(peers.peers).toEqual({ from: 'planner', to: 'researcher' });
    expect(peers.sections).toEqual([{ label: 'Message', text: 'find it' }]);
    const older = readable({ method: 'protocols/A2A', params: { message: { jsonrpc: '2.0', method: 'message/send', params: { message: { parts: [{ kind: 'text', text: 'yo' }] } } } } });
    expect(older.title).toBe('A2A message/send');
    expect(older.sections).toEqual([{ label: 'Message', text: 'yo' }]);
  });

  it('never throws on junk', () => {
    expect(readable(null).sections).toEqual([]);
    expect(readable('x', 'steps/message').title).toBe('Message');
    expect(partsText('nope')).toBe('');
    expect(valueText({ a: 1 })).toBe('{\n  "a": 1\n}');
  });
});

describe('outcome', () => {
  const call = (inputs: Record<string, unknown>) => ({
    jsonrpc: '2.0',
    id: 1,
    method: 'steps/toolCallRequest',
    params: { context: ctx, toolCallRequest: { executionId: 'e', toolId: 'send_email', inputs: Object.entries(inputs).map(([name, value]) => ({ name, value })) } },
  });

  it('reads the answer, its deciding rule and the modified request', () => {
    const mod = call({ to: 'bob@corp.example' });
    const a = answerOf({ jsonrpc: '2.0', id: 1, result: { decision: 'modify', message: 'Redacted', reasonCode: ['PII'], data: { ruleId: 'r1' }, modifiedRequest: mod } });
    expect(a).toMatchObject({ decision: 'modify', message: 'Redacted', reasonCodes: ['PII'], ruleId: 'r1', modifiedRequest: mod });
    expect(answerOf({ error: { code: -32602, message: 'bad' } }).error).toEqual({ code: -32602, message: 'bad' });
    expect(answerOf(null).reasonCodes).toEqual([]);
  });

  it('says when a session control decided, not a rule', () => {
    expect(controlReason('session-blocked')).toMatch(/blocked this session/);
    expect(controlReason('session-paused')).toMatch(/paused this session/);
    expect(controlReason('big-transfer')).toBeUndefined();
  });

  it('lists field-level changes by input name', () => {
    const before = call({ amount: 5000, to: 'ACME', memo: 'x' });
    const after = call({ amount: 50, to: 'ACME', note: 'capped' });
    expect(changesOf(before, after)).toEqual([
      { field: 'inputs.amount', before: 5000, after: 50, kind: 'changed' },
      { field: 'inputs.memo', before: 'x', kind: 'removed' },
      { field: 'inputs.note', after: 'capped', kind: 'added' },
    ]);
    const msg = (text: string) => ({ method: 'steps/message', params: { context: ctx, message: { id: 'm', role: 'agent', content: [{ kind: 'text', text }] } } });
    expect(changesOf(msg('card 4111'), msg('card [REDACTED:creditCard]'))).toEqual([
      { field: 'Text', before: 'card 4111', after: 'card [REDACTED:creditCard]', kind: 'changed' },
    ]);
    expect(changesOf(msg('a'), msg('a'))).toEqual([]);
  });

  it('counts what was actually redacted, not what the message claims', () => {
    const before = call({ to: 'billing@corp.example', body: 'card 4111 1111 1111 1111 and [REDACTED:ssn] already' });
    const after = call({ to: 'billing@corp.example', body: 'card [REDACTED:creditCard] and [REDACTED:ssn] already [REDACTED]' });
    expect(redactionsOf(before, after)).toEqual([
      { kind: 'creditCard', count: 1 },
      { kind: 'pattern', count: 1 },
    ]);
    expect(redactionsOf(before, before)).toEqual([]);
  });
});

describe('numbers past a JS number', () => {
  const big = new JsonNumber('12345678901234567891');
  const call = (value: unknown) => ({ method: 'steps/toolCallRequest', params: { toolCallRequest: { toolId: 't', inputs: [{ name: 'id', value }] } } });
  it('are shown with their digits and compared by them', () => {
    expect(valueText(readable(call(big)).inputs![0]!.value)).toBe('12345678901234567891');
    expect(changesOf(call(big), call(new JsonNumber('12345678901234567892')))).toEqual([
      { field: 'inputs.id', before: big, after: new JsonNumber('12345678901234567892'), kind: 'changed' },
    ]);
    expect(readable({ method: 'protocols/MCP', params: { message: { jsonrpc: '2.0', id: big, result: {} } } }).subtitle).toBe('id 12345678901234567891');
    expect(String(answerOf({ error: { code: big, message: 'no' } }).error?.code)).toBe('12345678901234567891');
  });
});

describe('how a held step ended', () => {
  const res = (message: string, reasonCode: string[] = []) => ({ jsonrpc: '2.0', id: 1, result: { decision: 'deny', message, reasonCode } });
  it('says "after review" only when a person decided', () => {
    expect(heldOutcome(res('Approved by rita'))).toBe('after review');
    expect(heldOutcome(res('Denied by rita: no'))).toBe('after review');
    expect(heldOutcome(undefined, 'modified')).toBe('after review');
  });
  it('names what happened when nobody reviewed it', () => {
    expect(heldOutcome(res('Held for review and timed out: no operator decided within 1s; decision on timeout: deny.'))).toBe('timed out');
    expect(heldOutcome(res('The guardian is restarting: the step was not reviewed and is denied; send it again shortly.', ['GUARDIAN_RESTARTING']))).toBe('interrupted');
    expect(heldOutcome(res('The agent disconnected while the step was held.'))).toBe('agent disconnected');
    expect(heldOutcome(null)).toBe('not reviewed');
    expect(heldOutcome(res('Approved by rita'), 'timedOut')).toBe('timed out');
    expect(heldOutcome(undefined, 'abandoned')).toBe('agent disconnected');
    expect(heldOutcome(undefined, 'interrupted')).toBe('interrupted');
  });
  it('says when the hold ended but that end could not be recorded, so the agent was denied', () => {
    const lost = res('The step was held for review and timed out (decision on timeout: allow), but that outcome could not be recorded, so the step is denied; send it again.', [
      'HOLD_NOT_RECORDED',
    ]);
    expect(heldOutcome(lost)).toBe('outcome not recorded');
    expect(heldOutcome(lost, 'interrupted')).toBe('outcome not recorded');
    expect(heldOutcome(lost, 'timedOut')).toBe('outcome not recorded'); // the timeout was stored after the agent was denied
  });
  it('claims nothing it cannot know', () => {
    expect(heldOutcome(undefined)).toBe('held for review');
  });
});
