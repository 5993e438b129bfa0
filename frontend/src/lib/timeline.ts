// A session's steps as rows grouped by turn: a header row whenever the turn changes. Pending
// holds of the session are rows too: a held step is stored only once it is decided, so until
// then the hold stands in for it, placed by when it was held.

import type { Hold, Step } from './types';

export type Row =
  | { type: 'turn'; key: string; turnId: string; number: number; at: string }
  | { type: 'step'; key: string; step: Step; turnNumber: number }
  | { type: 'hold'; key: string; hold: Hold; turnNumber: number };

/** The turn id of a held request (its StepContext's turnId), '' when it has none. */
export function holdTurn(h: Hold): string {
  const params = (h.request as { params?: { context?: { turnId?: unknown } } } | null)?.params;
  const t = params?.context?.turnId;
  return typeof t === 'string' ? t : '';
}

export function timelineRows(steps: Step[], pending: Hold[] = []): Row[] {
  const rows: Row[] = [];
  let turn: string | null = null;
  let n = 0;
  const header = (t: string, at: string) => {
    if (t === turn) return;
    turn = t;
    n++;
    rows.push({ type: 'turn', key: `t${n}:${t}`, turnId: t, number: n, at });
  };
  const holds = [...pending].sort((a, b) => Date.parse(a.createdAt) - Date.parse(b.createdAt) || (a.id < b.id ? -1 : 1));
  let h = 0;
  const flushHolds = (before: number) => {
    while (h < holds.length && Date.parse(holds[h]!.createdAt) < before) {
      const hold = holds[h++]!;
      header(holdTurn(hold), hold.createdAt);
      rows.push({ type: 'hold', key: `h${hold.id}`, hold, turnNumber: n });
    }
  };
  for (const s of steps) {
    flushHolds(Date.parse(s.receivedAt));
    header(s.turnId ?? '', s.receivedAt);
    rows.push({ type: 'step', key: `s${s.seq}`, step: s, turnNumber: n });
  }
  flushHolds(Infinity);
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

/** Puts the whole step in place of the truncated copy with its seq, if there is one. */
export function replaceStep(have: Step[], full: Step): Step[] {
  const i = have.findIndex((s) => s.seq === full.seq);
  if (i < 0) return have;
  const out = have.slice();
  out[i] = full;
  return out;
}
