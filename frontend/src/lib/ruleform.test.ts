import { describe, expect, it } from 'vitest';
import { WHEN_EXAMPLE, cleanRule, fieldErrors, newRule, parseSetLines, parseTestStep, ruleSetWith, setLines, slug, syncedRedactText, syncedSetText, whenDiagnostics } from './ruleform';
import type { Rule } from './types';

describe('whenDiagnostics', () => {
  const doc = 'tool == "x"\n  && inputs.amount >> 5';
  it('maps line:column onto the token there', () => {
    const d = whenDiagnostics([{ field: 'when', line: 2, column: 20, message: 'unexpected token Operator(">")' }], doc);
    expect(d).toHaveLength(1);
    expect(doc.slice(d[0]!.from, d[0]!.to)).toBe('>');
    expect(d[0]).toMatchObject({ line: 2, column: 20 });
  });
  it('keeps a position past the end as a point, and skips other fields', () => {
    const d = whenDiagnostics(
      [
        { field: 'when', line: 2, column: 99, message: 'unexpected end' },
        { field: 'message', line: 1, column: 3, message: 'unclosed {{' },
      ],
      doc,
    );
    expect(d).toEqual([{ from: doc.length, to: doc.length, message: 'unexpected end', line: 2, column: 99 }]);
  });
  it('an error without a position covers the whole condition', () => {
    expect(whenDiagnostics([{ message: 'expected bool, got int' }], 'a + 1')[0]).toMatchObject({ from: 0, to: 5 });
  });
});

describe('fieldErrors', () => {
  it('groups messages by field with positions', () => {
    expect(
      fieldErrors([
        { field: 'message', line: 1, column: 4, message: 'unclosed {{' },
        { field: 'id', message: 'required' },
        { field: 'id', message: 'too long' },
        { field: 'when', line: 1, column: 1, message: 'x' },
      ]),
    ).toEqual({ message: 'unclosed {{ (1:4)', id: 'required; too long' });
  });
});

describe('cleanRule and ruleSetWith', () => {
  it('drops server fields and unused sub-objects', () => {
    const r: Rule = {
      ...newRule(),
      id: ' big ',
      name: 'Big',
      action: 'hold',
      hold: { timeout: '2m', onTimeout: 'deny' },
      modify: { redact: ['pii'] },
      version: 3,
      updatedAt: 'x',
      stats: { evaluations: 1, matches: 1, errors: 0, avgMicros: 1 },
    };
    expect(cleanRule(r)).toEqual({
      id: 'big',
      name: 'Big',
      when: r.when,
      action: 'hold',
      priority: 0,
      mode: 'enforce',
      enabled: true,
      hold: { timeout: '2m', onTimeout: 'deny' },
    });
    const m = cleanRule({ ...newRule(), id: 'm', action: 'modify', modify: { redact: ['pii', ' ', 'secrets'], set: { to: '"x"', '': 'y' } } });
    expect(m.modify).toEqual({ redact: ['pii', 'secrets'], set: { to: '"x"' } });
  });
  it('replaces the edited rule, also when its id was renamed', () => {
    const rules: Rule[] = [
      { id: 'a', when: 'true', action: 'allow' },
      { id: 'b', when: 'true', action: 'deny' },
    ];
    expect(ruleSetWith(rules, { id: 'b2', when: 'false', action: 'deny' }, 'b').map((r) => r.id)).toEqual(['a', 'b2']);
    expect(ruleSetWith(rules, { id: 'c', when: 'x', action: 'hold' }).map((r) => r.id)).toEqual(['a', 'b', 'c']);
  });
});

describe('small helpers', () => {
  it('slug', () => expect(slug('  No e-mail outside Corp.Example!  ')).toBe('no-e-mail-outside-corp-example'));
  it('set lines round trip', () => {
    const set = parseSetLines('to = "legal@corp.example"\nbad line\n amount = inputs.amount / 2 ');
    expect(set).toEqual({ to: '"legal@corp.example"', amount: 'inputs.amount / 2' });
    expect(parseSetLines(setLines(set))).toEqual(set);
  });
  it('parseTestStep', () => {
    expect(parseTestStep('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1}}')).toEqual({ method: 'ping', params: { a: 1 } });
    expect(parseTestStep('{"params":{}}')).toMatch(/method/);
    expect(parseTestStep('{')).toMatch(/Not valid JSON/);
  });
});

describe('newRule', () => {
  it('starts with an empty condition: the example is a placeholder, not text to type into', () => {
    const r = newRule();
    expect(r.when).toBe('');
    expect(cleanRule({ ...r, id: 'x' }).when).toBe('');
    expect(WHEN_EXAMPLE).toContain('send_email');
    // Each call is a fresh draft.
    expect(newRule()).not.toBe(r);
  });
});

describe('syncedRedactText and syncedSetText', () => {
  it('follow a draft replaced under the form (a change elsewhere, Load their version)', () => {
    // The form showed the old rule; the draft now holds {redact: ["phone"], set: {}}.
    expect(syncedRedactText('email, ACCT-[0-9]+', ['phone'])).toBe('phone');
    expect(syncedSetText('note = "x"', {})).toBe('');
    expect(syncedSetText('', { b: '2', a: '"1"' })).toBe('b = 2\na = "1"');
    expect(syncedRedactText('pii', undefined)).toBe('');
  });
  it('leave the text being typed alone while it reads as the draft', () => {
    expect(syncedRedactText('email, ', ['email'])).toBe('email, ');
    expect(syncedRedactText(' email ,phone', ['email', 'phone'])).toBe(' email ,phone');
    expect(syncedSetText('a = 1\nb = ', { a: '1' })).toBe('a = 1\nb = ');
    expect(syncedSetText('b = 2\na = 1', { a: '1', b: '2' })).toBe('b = 2\na = 1');
  });
});
