// A session's steps as rows grouped by turn: a header row whenever the turn changes.

import type { Step } from './types';

export type Row =
  | { type: 'turn'; key: string; turnId: string; number: number; at: string }
  | { type: 'step'; key: string; step: Step; turnNumber: number };

export function timelineRows(steps: Step[]): Row[] {
  const rows: Row[] = [];
  let turn: string | null = null;
  let n = 0;
  for (const s of steps) {
    const t = s.turnId ?? '';
    if (t !== turn) {
      turn = t;
      n++;
      rows.push({ type: 'turn', key: `t${n}:${t}`, turnId: t, number: n, at: s.receivedAt });
    }
    rows.push({ type: 'step', key: `s${s.seq}`, step: s, turnNumber: n });
  }
  return rows;
}

/** Appends steps not already present (by seq), keeping arrival order. */
export function appendSteps(have: Step[], more: Step[]): Step[] {
  if (more.length === 0) return have;
  const last = have.length ? have[have.length - 1]!.seq : 0;
  const fresh = more.filter((s) => s.seq > last);
  if (fresh.length === 0) return have;
  fresh.sort((a, b) => a.seq - b.seq);
  return have.concat(fresh);
}
