// Shapes /api/stats for the charts: per-minute decisions as stacked series (uPlot draws
// series in order, so the tallest cumulative series goes first and each next one overdraws
// its lower part), and the share of each decision.

import type { MinuteStats } from './types';

export const STACK = ['allow', 'modify', 'hold', 'deny'] as const;
export type StackKey = (typeof STACK)[number];

export interface Stacked {
  /** Unix seconds of each minute. */
  x: number[];
  /** Raw counts per decision. */
  raw: Record<StackKey, number[]>;
  /** Cumulative series, top first: deny-top (total), hold-top, modify-top, allow. */
  drawn: { key: StackKey; values: number[] }[];
}

export function stackMinutes(minutes: MinuteStats[] | null | undefined): Stacked {
  const ms = (minutes ?? []).slice().sort((a, b) => Date.parse(a.minute) - Date.parse(b.minute));
  const x = ms.map((m) => Math.floor(Date.parse(m.minute) / 1000));
  const raw = Object.fromEntries(STACK.map((k) => [k, ms.map((m) => m[k] ?? 0)])) as Record<StackKey, number[]>;
  const cumulative: number[][] = [];
  let acc = ms.map(() => 0);
  for (const k of STACK) {
    acc = acc.map((v, i) => v + raw[k][i]!);
    cumulative.push(acc);
  }
  const drawn = STACK.map((key, i) => ({ key, values: cumulative[i]! })).reverse();
  return { x, raw, drawn };
}

export function totals(minutes: MinuteStats[] | null | undefined): Record<StackKey, number> & { all: number } {
  const t = { allow: 0, modify: 0, hold: 0, deny: 0, all: 0 };
  for (const m of minutes ?? []) {
    for (const k of STACK) {
      t[k] += m[k] ?? 0;
      t.all += m[k] ?? 0;
    }
  }
  return t;
}

/** Width of a bar as a percentage of the largest, at least 2 % so small values stay visible. */
export function barWidth(value: number, max: number): number {
  if (max <= 0 || value <= 0) return 0;
  return Math.max(2, Math.round((value / max) * 100));
}
