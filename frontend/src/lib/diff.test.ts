import { describe, expect, it } from 'vitest';
import { RULE_META, diffJson, jsonEqual, lineDiff, preview } from './diff';

describe('jsonEqual', () => {
  it('ignores key order and undefined members', () => {
    expect(jsonEqual({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 })).toBe(true);
    expect(jsonEqual({ a: 1, x: undefined }, { a: 1 })).toBe(true);
    expect(jsonEqual([1, 2], [2, 1])).toBe(false);
    expect(jsonEqual(null, {})).toBe(false);
  });
});

describe('diffJson', () => {
  it('lists added, removed and changed leaves with paths', () => {
    const a = { id: 'r', action: 'deny', hold: { timeout: '2m' }, modify: { redact: ['pii', 'secrets'] }, version: 1, 'odd key': 1 };
    const b = { id: 'r', action: 'hold', hold: { timeout: '5m', onTimeout: 'deny' }, modify: { redact: ['pii'] }, version: 2, 'odd key': 2 };
    expect(diffJson(a, b, RULE_META)).toEqual([
      { kind: 'changed', path: 'action', before: 'deny', after: 'hold' },
      { kind: 'added', path: 'hold.onTimeout', after: 'deny' },
      { kind: 'changed', path: 'hold.timeout', before: '2m', after: '5m' },
      { kind: 'removed', path: 'modify.redact[1]', before: 'secrets' },
      { kind: 'changed', path: '["odd key"]', before: 1, after: 2 },
    ]);
  });
  it('treats a type change as one change and equal values as none', () => {
    expect(diffJson({ a: { x: 1 } }, { a: [1] })).toEqual([{ kind: 'changed', path: 'a', before: { x: 1 }, after: [1] }]);
    expect(diffJson({ a: 1 }, { a: 1 })).toEqual([]);
  });
});

describe('lineDiff', () => {
  it('finds the changed lines', () => {
    const ops = lineDiff('tool == "a"\n&& x > 1\n|| y', 'tool == "a"\n&& x > 2\n|| y');
    expect(ops.map((o) => `${o.op}:${o.text}`)).toEqual(['same:tool == "a"', 'del:&& x > 1', 'add:&& x > 2', 'same:|| y']);
    expect(ops[2]).toMatchObject({ b: 2 });
  });
  it('handles empty sides', () => {
    expect(lineDiff('', 'a\nb').map((o) => o.op)).toEqual(['add', 'add']);
    expect(lineDiff('a', '').map((o) => o.op)).toEqual(['del']);
    expect(lineDiff('', '')).toEqual([]);
  });
});

describe('preview', () => {
  it('shortens long values', () => {
    expect(preview('x'.repeat(200), 10)).toHaveLength(10);
    expect(preview({ a: 1 })).toBe('{"a":1}');
  });
});
