import { describe, expect, it } from 'vitest';
import { opText, rowLabel, turnGroups, type CompareRow } from './compare';
import { href, parseHash } from './router';

const step = (seq: number) => ({ seq, method: 'steps/toolCallRequest', kind: 'toolCall', decision: 'allow', rules: [] });

describe('compare route', () => {
  it.each([
    ['#/compare', { page: 'compare' }],
    ['#/compare?a=s1', { page: 'compare', a: 's1' }],
    ['#/compare?a=s%201&b=x%2Fy', { page: 'compare', a: 's 1', b: 'x/y' }],
  ])('%s', (hash, route) => {
    expect(parseHash(hash)).toEqual(route);
    expect(parseHash(href(parseHash(hash)))).toEqual(route);
  });
});

describe('compare rows', () => {
  const rows: CompareRow[] = [
    { turn: 1, a: step(1), b: step(11), status: 'same' },
    { turn: 1, a: step(2), b: step(12), status: 'differ', diff: ['decision', 'rules'] },
    { turn: 2, a: null, b: step(13), status: 'onlyB' },
    { turn: 2, a: step(3), b: null, status: 'onlyA' },
  ];
  it('labels every difference in words', () => {
    expect(rows.map(rowLabel)).toEqual(['same', 'differs: decision, matched rules', 'only in B', 'only in A']);
  });
  it('groups by turn, optionally only differences', () => {
    expect(turnGroups(rows, false).map((g) => [g.turn, g.rows.length])).toEqual([[1, 2], [2, 2]]);
    expect(turnGroups(rows, true).map((g) => [g.turn, g.rows.length])).toEqual([[1, 1], [2, 2]]);
  });
  it('writes patch operations as lines', () => {
    expect(opText({ op: 'replace', path: '/to', old: 'bob', value: 'ann' })).toBe('/to: "bob" → "ann"');
    expect(opText({ op: 'add', path: '/cc', value: ['x'] })).toBe('/cc: added ["x"]');
    expect(opText({ op: 'remove', path: '', old: 1 })).toBe('(whole): removed 1');
  });
  it('closes a bidi override in one value before the arrow and the other value', () => {
    // An RLO left open in the old value drew "→ new" after it right to left.
    expect(opText({ op: 'replace', path: '/note', old: 'ok\u202e', value: 'ok' })).toBe('/note: "ok\u202e"\u202c → "ok"');
    expect(opText({ op: 'add', path: '/a\u202eb', value: 1 })).toBe('/a\u202eb\u202c: added 1');
  });
});
