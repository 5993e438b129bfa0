// Loading a page from the API while the live stream goes on, without losing or doubling what the
// stream says meanwhile (docs/live-stream.md, "Resuming"). The review queue was first to need it
// (app.refreshHolds); the session list, a session's timeline and the audit log use this.
//
// Two gaps, two rules:
//  - An answer is a snapshot taken at some moment while its request was on its way: live events
//    that arrive meanwhile may be newer than it, or already in it. The events recorded while a
//    load was on its way are applied again on top of its answer: every page's reducer ignores
//    what a snapshot already reflects (by seq or id), so nothing is lost or counted twice.
//  - The stream starts live: its first connection replays nothing (there is no seq to resume
//    after yet), so what was stored between a page's first load and the stream's opening is in
//    neither. A page loads again every time the stream opens; what it loads then is on its way
//    with the stream open, so the first rule covers the rest. A load that was on its way when
//    the stream opened is told so (reopened): what arrived during it may lack what was stored
//    before the opening, so it is not a complete account of what came after its answer.

import type { LiveEvent } from './types';

/**
 * A load's answer (or its failure), the live events that arrived while it was on its way, and
 * whether the stream (re)opened meanwhile (followed pages only: the events may then lack what
 * was stored before it opened; the reload the opening started brings that).
 */
export type Tracked<T> = ({ ok: true; value: T } | { ok: false; error: unknown }) & { arrived: LiveEvent[]; reopened: boolean };

/** Where live events come from: the console's one stream (app). */
export interface LiveSource {
  subscribe(fn: (events: LiveEvent[]) => void): () => void;
  /** fn runs each time the stream opens: the first time and after every reconnection. */
  onLiveOpen(fn: () => void): () => void;
}

export class LiveLoads {
  private readonly underway = new Set<LiveEvent[]>();
  /** How many times the followed stream opened. */
  private opens = 0;

  /** Hands a batch of live events to every load on its way (stats ticks, seq 0, are not kept). */
  record(events: readonly LiveEvent[]): void {
    if (this.underway.size === 0) return;
    const kept = events.filter((e) => e.seq > 0);
    if (kept.length) for (const b of this.underway) b.push(...kept);
  }

  /** Whether a load is on its way. */
  get busy(): boolean {
    return this.underway.size > 0;
  }

  /**
   * Runs load (at once, before it returns) and resolves with its answer or error, never
   * rejecting, and the live events recorded while it was on its way, in the order they came.
   */
  async track<T>(load: () => Promise<T>): Promise<Tracked<T>> {
    const arrived: LiveEvent[] = [];
    const opens = this.opens;
    this.underway.add(arrived);
    try {
      const value = await load();
      return { ok: true, value, arrived, reopened: this.opens !== opens };
    } catch (error) {
      return { ok: false, error, arrived, reopened: this.opens !== opens };
    } finally {
      this.underway.delete(arrived);
    }
  }

  /**
   * A page follows the stream: every batch is recorded for the loads on their way, then handed
   * to onEvents; reload runs each time the stream opens. Returns what stops both.
   */
  follow(source: LiveSource, onEvents: (events: LiveEvent[]) => void, reload: () => void): () => void {
    const off = source.subscribe((events) => {
      this.record(events);
      onEvents(events);
    });
    const offOpen = source.onLiveOpen(() => {
      this.opens++;
      reload();
    });
    return () => {
      off();
      offOpen();
    };
  }
}

/**
 * Merges two lists that are each newest first by a numeric key (an audit entry's id), keeping
 * one item per key (the first list's) and the order newest first.
 */
export function mergeNewestFirst<T>(a: readonly T[], b: readonly T[], key: (x: T) => number): T[] {
  const seen = new Set<number>();
  const out: T[] = [];
  for (const x of [...a, ...b].sort((p, q) => key(q) - key(p))) {
    const k = key(x);
    if (seen.has(k)) continue;
    seen.add(k);
    out.push(x);
  }
  return out;
}
