// The review queue as a pure reducer, and the countdown arithmetic. Deadlines are the server's
// clock; the browser's clock may be off, so countdowns use an offset estimated from live events.

import type { Hold, LiveEvent } from './types';

export interface HoldsState {
  /** Pending holds, oldest first (the order operators should work in). */
  pending: Hold[];
  /** Recently resolved holds, newest first, capped. */
  recent: Hold[];
}

export const RECENT_MAX = 50;

export function emptyHolds(): HoldsState {
  return { pending: [], recent: [] };
}

const byCreated = (a: Hold, b: Hold) => Date.parse(a.createdAt) - Date.parse(b.createdAt) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/**
 * Replaces the pending list with a snapshot from GET /api/holds, minus holds already resolved.
 * `before` is the ids pending when the request was sent: a hold that arrived live while it was
 * on its way (not among them) is kept even though the snapshot, taken earlier, lacks it;
 * without `before`, the live stream's news could be overwritten by an older snapshot and a
 * held step vanish from the queue until the next refresh.
 */
export function setPending(state: HoldsState, holds: Hold[], before?: ReadonlySet<string>): HoldsState {
  const resolved = new Set(state.recent.map((h) => h.id));
  const inSnapshot = new Set(holds.map((h) => h.id));
  const arrived = before ? state.pending.filter((h) => !before.has(h.id) && !inSnapshot.has(h.id)) : [];
  const pending = [...holds.filter((h) => h.status === 'pending'), ...arrived].filter((h) => !resolved.has(h.id)).sort(byCreated);
  return { ...state, pending };
}

/** An answer of GET /api/holds?status=pending. */
export interface PendingPage {
  holds: Hold[] | null;
  now?: string;
}

/**
 * The loads of the pending queue. The queue loads again each time the live stream opens, so two
 * loads can be on their way at once and the first can answer last: its snapshot is the older
 * one, and may still list a hold that the newer one, already shown, knows was decided while the
 * stream was down. An answer is only taken when no load started after it has been taken.
 */
export class PendingLoads {
  private started = 0;
  private taken = 0;
  /** The ids each load on its way knows of (setPending's `before`). */
  private readonly underway = new Set<Set<string>>();

  /** Whether a load is on its way. */
  get busy(): boolean {
    return this.underway.size > 0;
  }

  /**
   * Runs load (at once) and resolves with the queue its answer makes of the state as it is then
   * (setPending: holds that arrived live meanwhile are kept) and the answer's server time; null
   * when a load started after it answered first. Rejects with its error unless a load was started
   * after it (whose answer or error then stands for both).
   */
  async run(state: () => HoldsState, load: () => Promise<PendingPage>): Promise<{ state: HoldsState; now?: string } | null> {
    const n = ++this.started;
    const before = new Set(state().pending.map((h) => h.id));
    this.underway.add(before);
    try {
      const page = await load();
      if (n < this.taken) return null;
      this.taken = n;
      const holds = page.holds ?? [];
      // What this answer lists did not arrive live for the loads still on their way: a hold
      // their newer answers leave out ended meanwhile.
      for (const b of this.underway) for (const h of holds) b.add(h.id);
      return { state: setPending(state(), holds, before), ...(page.now ? { now: page.now } : {}) };
    } catch (err) {
      if (n < this.started) return null;
      throw err;
    } finally {
      this.underway.delete(before);
    }
  }
}

export function applyHoldEvents(state: HoldsState, events: LiveEvent[]): HoldsState {
  let pending = state.pending;
  let recent = state.recent;
  let changed = false;
  for (const e of events) {
    if (e.type === 'hold.created') {
      const h = e.payload;
      if (!h?.id || recent.some((r) => r.id === h.id)) continue;
      const i = pending.findIndex((p) => p.id === h.id);
      pending = i >= 0 ? pending.map((p, j) => (j === i ? h : p)) : [...pending, h].sort(byCreated);
      changed = true;
    } else if (e.type === 'hold.resolved') {
      let h = e.payload;
      if (!h?.id) continue;
      // The event says how the hold ended but leaves out the request (hold.created carried
      // it): keep the one the pending hold had, so the hold still shows what was held.
      const was = pending.find((p) => p.id === h.id);
      if (was && (h.request === null || h.request === undefined)) h = { ...h, request: was.request };
      pending = pending.filter((p) => p.id !== h.id);
      recent = [h, ...recent.filter((r) => r.id !== h.id)].slice(0, RECENT_MAX);
      changed = true;
    }
  }
  return changed ? { pending, recent } : state;
}

/** Pending holds per session id. */
export function holdsBySession(pending: Hold[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const h of pending) m.set(h.sessionId, (m.get(h.sessionId) ?? 0) + 1);
  return m;
}

/** Milliseconds left until the deadline, never negative. */
export function remainingMs(deadline: string, serverNow: number, createdAt?: string): number {
  const d = Date.parse(deadline);
  if (Number.isNaN(d)) return 0;
  const left = Math.max(0, d - serverNow);
  // A clock estimate slightly behind the server must not show more time than the hold has.
  const c = createdAt ? Date.parse(createdAt) : NaN;
  return Number.isNaN(c) || d <= c ? left : Math.min(left, d - c);
}

/** Fraction of the hold's time still left, 0..1. */
export function remainingFraction(createdAt: string, deadline: string, serverNow: number): number {
  const c = Date.parse(createdAt);
  const d = Date.parse(deadline);
  if (Number.isNaN(c) || Number.isNaN(d) || d <= c) return 0;
  return Math.min(1, Math.max(0, (d - serverNow) / (d - c)));
}

/** "1:05", "0:09", "1:02:03"; seconds round up so 0:00 means it is really over. */
export function formatCountdown(ms: number): string {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const ss = String(s).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

export type Urgency = 'calm' | 'soon' | 'urgent' | 'expired';

/** Under 30 s or a fifth of the time left is urgent, under 60 s or half is soon. */
export function urgency(ms: number, fraction: number): Urgency {
  if (ms <= 0) return 'expired';
  if (ms < 30_000 || fraction < 0.2) return 'urgent';
  if (ms < 60_000 || fraction < 0.5) return 'soon';
  return 'calm';
}

/**
 * Estimates server clock minus local clock from events' `at` stamps taken when they arrive. An
 * event is stamped before it is received, so every sample is a lower bound on the true offset;
 * the largest recent one is the best estimate.
 */
export class ClockOffset {
  private samples: number[] = [];
  constructor(private readonly keep = 20) {}

  observe(serverAt: string, localNow: number): void {
    const t = Date.parse(serverAt);
    if (Number.isNaN(t)) return;
    this.samples.push(t - localNow);
    if (this.samples.length > this.keep) this.samples.shift();
  }

  get offset(): number {
    if (this.samples.length === 0) return 0;
    return Math.max(...this.samples);
  }

  serverNow(localNow: number): number {
    return localNow + this.offset;
  }
}

/** Durations offered for "approve and remember", as the API's expiresIn strings. */
export const REMEMBER_FOR = [
  { value: '1h', label: '1 hour' },
  { value: '8h', label: '8 hours' },
  { value: '24h', label: '24 hours' },
  { value: '168h', label: '7 days' },
  { value: '720h', label: '30 days' },
] as const;
