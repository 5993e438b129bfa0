import { describe, expect, it } from 'vitest';
import { barWidth, stackMinutes, totals } from './chartdata';

const m = (minute: string, allow: number, deny: number, modify = 0, hold = 0) => ({ minute, allow, deny, modify, hold });

describe('stackMinutes', () => {
  it('sorts by minute and stacks with the total drawn first', () => {
    const s = stackMinutes([m('2025-01-01T00:01:00Z', 5, 1, 2, 1), m('2025-01-01T00:00:00Z', 3, 0)]);
    expect(s.x).toEqual([1735689600, 1735689660]);
    expect(s.raw.allow).toEqual([3, 5]);
    expect(s.drawn.map((d) => d.key)).toEqual(['deny', 'hold', 'modify', 'allow']);
    expect(s.drawn[0]!.values).toEqual([3, 9]); // total
    expect(s.drawn[3]!.values).toEqual([3, 5]); // allow alone
    expect(s.drawn[2]!.values).toEqual([3, 7]); // allow + modify
  });
  it('handles no data', () => {
    expect(stackMinutes(null).x).toEqual([]);
  });
});

describe('totals and barWidth', () => {
  it('adds up', () => {
    expect(totals([m('a', 1, 2, 3, 4), m('b', 1, 0)])).toEqual({ allow: 2, deny: 2, modify: 3, hold: 4, all: 11 });
  });
  it('scales bars', () => {
    expect(barWidth(50, 100)).toBe(50);
    expect(barWidth(1, 1000)).toBe(2);
    expect(barWidth(0, 10)).toBe(0);
    expect(barWidth(3, 0)).toBe(0);
  });
});
