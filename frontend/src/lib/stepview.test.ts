import { describe, expect, it } from 'vitest';
import { kindOf, partsText, readable, valueText } from './stepview';

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
      expect(r.inputs).toEqual([{ name: 'path', value: '/etc/passwd' }]);
    }
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
    expect(kindOf('tasks/get')).toBe('a2a');
  });

  it('never throws on junk', () => {
    expect(readable(null).sections).toEqual([]);
    expect(readable('x', 'steps/message').title).toBe('Message');
    expect(partsText('nope')).toBe('');
    expect(valueText({ a: 1 })).toBe('{\n  "a": 1\n}');
  });
});
