// A session's steps as rows grouped by turn: a header row per turn. Pending holds of the
// session are rows too: a held step is stored only once it is decided, so until then the hold
// stands in for it, placed by when it was held.

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

/**
 * The rows of a timeline: one header per turn (by turn id: steps without one form one turn),
 * turns in the order they began, and each turn's steps and pending holds in the order they
 * arrived. A held step is stored (and given its seq) only once it is decided, after the steps
 * that came while it waited: ordering by arrival puts it back where it was held, in its turn,
 * instead of under a second header for the same turn at the end.
 */
export function timelineRows(steps: Step[], pending: Hold[] = []): Row[] {
  interface Item {
    t: number;
    /** Tie-breaks equal times: seq for steps (arrival), after every step for holds. */
    seq: number;
    id: string;
    at: string;
    step?: Step;
    hold?: Hold;
  }
  interface Turn {
    id: string;
    order: number;
    items: Item[];
    sorted: boolean;
  }
  const turns = new Map<string, Turn>();
  const add = (turnId: string, it: Item) => {
    let g = turns.get(turnId);
    if (!g) {
      g = { id: turnId, order: turns.size, items: [], sorted: true };
      turns.set(turnId, g);
    }
    const last = g.items[g.items.length - 1];
    if (last && byArrival(last, it) > 0) g.sorted = false;
    g.items.push(it);
  };
  let prev = -Infinity;
  for (const s of steps) {
    const parsed = Date.parse(s.receivedAt);
    // A step without a readable time stays after the one before it.
    const t = Number.isNaN(parsed) ? prev : parsed;
    prev = t;
    add(s.turnId ?? '', { t, seq: s.seq, id: '', at: s.receivedAt, step: s });
  }
  for (const h of pending) {
    const parsed = Date.parse(h.createdAt);
    add(holdTurn(h), { t: Number.isNaN(parsed) ? Infinity : parsed, seq: Infinity, id: h.id, at: h.createdAt, hold: h });
  }
  const groups = [...turns.values()];
  for (const g of groups) if (!g.sorted) g.items.sort(byArrival);
  groups.sort((a, b) => byArrival(a.items[0]!, b.items[0]!) || a.order - b.order);

  const rows: Row[] = [];
  groups.forEach((g, i) => {
    const n = i + 1;
    rows.push({ type: 'turn', key: `t:${g.id}`, turnId: g.id, number: n, at: g.items[0]!.at });
    for (const it of g.items) {
      if (it.step) rows.push({ type: 'step', key: `s${it.step.seq}`, step: it.step, turnNumber: n });
      else if (it.hold) rows.push({ type: 'hold', key: `h${it.hold.id}`, hold: it.hold, turnNumber: n });
    }
  });
  return rows;
}

function byArrival(a: { t: number; seq: number; id: string }, b: { t: number; seq: number; id: string }): number {
  if (a.t !== b.t) return a.t < b.t ? -1 : 1;
  if (a.seq !== b.seq) return a.seq < b.seq ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
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
