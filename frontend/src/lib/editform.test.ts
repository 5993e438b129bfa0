import { describe, expect, it } from 'vitest';
import { applyDrafts, draftValue, editChanges, editFields, initialDraft, sentParams } from './editform';

const tool = {
  context: { session: { id: 's' } },
  toolCallRequest: {
    toolId: 'transfer_funds',
    inputs: [
      { name: 'amount', value: 9000 },
      { name: 'to', value: 'ACME GmbH' },
      { name: 'urgent', value: false },
      { name: 'meta', value: { ref: 'INV-1' } },
    ],
  },
};

describe('editFields', () => {
  it('offers a tool call’s arguments with the input of their JSON type', () => {
    const f = editFields('steps/toolCallRequest', tool);
    expect(f.map((x) => [x.label, x.type])).toEqual([
      ['amount', 'number'],
      ['to', 'string'],
      ['urgent', 'boolean'],
      ['meta', 'json'],
    ]);
    expect(f[0]!.key).toBe('toolCallRequest.inputs[0].value');
  });
  it('offers message text as textareas and MCP tools/call arguments', () => {
    const msg = { message: { role: 'user', content: [{ kind: 'text', text: 'hi' }, { kind: 'file', file: {} }, { kind: 'text', text: 'there' }] } };
    expect(editFields('steps/message', msg).map((x) => [x.label, x.type, x.key])).toEqual([
      ['Message text 1', 'text', 'message.content[0].text'],
      ['Message text 2', 'text', 'message.content[2].text'],
    ]);
    const mcp = { message: { jsonrpc: '2.0', method: 'tools/call', params: { name: 'read', arguments: { path: '/etc' } } } };
    expect(editFields('protocols/MCP', mcp).map((x) => x.key)).toEqual(['message.params.arguments.path']);
    expect(editFields('steps/knowledgeRetrieval', {})).toEqual([]);
  });
});

describe('applyDrafts and editChanges', () => {
  it('puts the drafts in a copy and lists what changed by field', () => {
    const f = editFields('steps/toolCallRequest', tool);
    const drafts = Object.fromEntries(f.map((x) => [x.key, initialDraft(x)]));
    drafts['toolCallRequest.inputs[0].value'] = '900';
    drafts['toolCallRequest.inputs[2].value'] = true;
    drafts['toolCallRequest.inputs[3].value'] = '{"ref": "INV-2"}';
    const r = applyDrafts(tool, f, drafts);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(tool.toolCallRequest.inputs[0]!.value).toBe(9000);
    expect(editChanges(tool, r.value, f)).toEqual([
      { kind: 'changed', label: 'amount', before: 9000, after: 900 },
      { kind: 'changed', label: 'urgent', before: false, after: true },
      { kind: 'changed', label: 'meta.ref', before: 'INV-1', after: 'INV-2' },
    ]);
  });
  it('refuses a draft that is not of its type, naming the field', () => {
    const [amount, , , meta] = editFields('steps/toolCallRequest', tool);
    expect(draftValue(amount!, 'abc')).toEqual({ ok: false, field: amount!.key, message: 'amount: a number is needed' });
    expect(draftValue(amount!, ' ').ok).toBe(false);
    expect(draftValue(meta!, '{').ok).toBe(false);
    expect(draftValue(meta!, 'null')).toEqual({ ok: true, value: null });
  });
  it('labels changes outside the fields by their path', () => {
    const after = structuredClone(tool);
    after.toolCallRequest.toolId = 'pay';
    expect(editChanges(tool, after, [])).toEqual([{ kind: 'changed', label: 'toolCallRequest.toolId', before: 'transfer_funds', after: 'pay' }]);
  });
});

describe('edits of the params as the agent sent them (exact JSON)', () => {
  // A held transfer as GET /api/holds/{id} answers it: the amount is beyond 2^53.
  const params =
    '{"context":{"session":{"id":"s"}},"toolCallRequest":{"toolId":"transfer_funds","inputs":[{"name":"amount","value":9007199254740993},{"name":"to","value":"ACME GmbH"},{"name":"note","value":"caf\\u00e9"},{"name":"meta","value":{"n":1.50,"big":12345678901234567890}}]}}';
  const holdText = `{"id":"h1","method":"steps/toolCallRequest","request":{"jsonrpc":"2.0","id":1,"method":"steps/toolCallRequest","params":${params}},"status":"pending"}`;

  it('reads the params from the hold’s JSON text as sent, and shows the exact digits', () => {
    const doc = sentParams(holdText);
    expect(doc.text).toBe(params);
    const f = editFields('steps/toolCallRequest', doc.value);
    expect(f.map((x) => [x.label, x.type, initialDraft(x)])).toEqual([
      ['amount', 'number', '9007199254740993'],
      ['to', 'string', 'ACME GmbH'],
      ['note', 'string', 'café'],
      ['meta', 'json', '{\n  "n": 1.50,\n  "big": 12345678901234567890\n}'],
    ]);
  });

  it('changes only the edited field: every other byte goes back as the agent sent it', () => {
    const doc = sentParams(holdText);
    const f = editFields('steps/toolCallRequest', doc.value);
    const drafts = Object.fromEntries(f.map((x) => [x.key, initialDraft(x)]));
    drafts['toolCallRequest.inputs[1].value'] = 'Other Ltd';
    const r = applyDrafts(doc, f, drafts);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.text).toBe(params.replace('"ACME GmbH"', '"Other Ltd"'));
    expect(editChanges(doc.value, r.value, f)).toEqual([{ kind: 'changed', label: 'to', before: 'ACME GmbH', after: 'Other Ltd' }]);
  });

  it('sends a changed number with the digits typed, and nothing changed is no change', () => {
    const doc = sentParams(holdText);
    const f = editFields('steps/toolCallRequest', doc.value);
    const drafts = Object.fromEntries(f.map((x) => [x.key, initialDraft(x)]));
    const same = applyDrafts(doc, f, drafts);
    expect(same.ok && same.text).toBe(params);
    expect(same.ok && editChanges(doc.value, same.value, f)).toEqual([]);

    drafts['toolCallRequest.inputs[0].value'] = '9007199254740995';
    drafts['toolCallRequest.inputs[3].value'] = '{ "n": 1.5,\n "big": 12345678901234567890 }'; // re-spaced: the same value
    const r = applyDrafts(doc, f, drafts);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.text).toBe(params.replace('9007199254740993', '9007199254740995'));
    expect(editChanges(doc.value, r.value, f).map((c) => [c.label, String(c.before), String(c.after)])).toEqual([['amount', '9007199254740993', '9007199254740995']]);
    expect(draftValue(f[0]!, '9007199254740993')).toEqual({ ok: true, value: f[0]!.original });
  });
});
