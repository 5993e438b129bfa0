// The session list as a pure reducer: REST pages and live events go in, a list ordered by the
// newest step comes out. Every update is idempotent (a step at or below a session's lastSeq is
// ignored), so a page fetched while events stream in never double counts.

import type { Hold, LiveEvent, Peer, Session, SessionControlChange, Step } from './types';

export interface SessionsState {
  byId: Map<string, Session>;
  /** Session ids, newest activity (highest lastSeq) first. */
  order: string[];
  /** Cursor for the next (older) page; null when everything is loaded or the list was capped. */
  next: string | null;
  /** Older sessions were dropped to respect the memory cap. */
  truncated: boolean;
  /** Bumped on every change, so views can cheaply tell that something moved. */
  version: number;
}

export function emptySessions(): SessionsState {
  return { byId: new Map(), order: [], next: null, truncated: false, version: 0 };
}

/** The session after one more step; unchanged when the step is not newer than what it holds. */
export function applyStep(s: Session | undefined, step: Step): Session {
  if (s && step.seq <= s.lastSeq) return s;
  const decisions = { ...(s?.decisions ?? {}) };
  const d = step.decision || 'unknown';
  decisions[d] = (decisions[d] ?? 0) + 1;
  return {
    id: step.sessionId,
    agentId: step.agentId || s?.agentId,
    agentName: step.agentName || s?.agentName,
    userId: step.userId || s?.userId,
    firstSeen: s?.firstSeen ?? step.receivedAt,
    lastSeen: step.receivedAt,
    lastSeq: step.seq,
    steps: (s?.steps ?? 0) + 1,
    decisions,
    lastMethod: step.method,
    control: s?.control ?? 'active',
    pendingHolds: s?.pendingHolds ?? 0,
    client: step.client ?? s?.client,
    server: step.server ?? s?.server,
  };
}

/**
 * One session after live events: its steps (applyStep: one it already counts is ignored, so an
 * answer of GET /api/sessions/{id} can be brought up to date with the events that arrived while
 * it was on its way) and its controls. Events of other sessions are ignored; undefined stays
 * undefined until a step of the session comes.
 */
export function applySessionEvents(s: Session | undefined, id: string, events: readonly LiveEvent[]): Session | undefined {
  let out = s;
  for (const e of events) {
    if (e.type === 'step' && e.payload?.sessionId === id) out = applyStep(out, e.payload);
    else if (e.type === 'session.control' && out && (e.payload?.sessionId ?? e.sessionId) === id) {
      const control = controlState(e.payload.control);
      if (out.control !== control) out = { ...out, control };
    }
  }
  return out;
}

/** A peer as shown: its name and version. */
export function peerLabel(p: Peer | undefined): string {
  if (!p) return '';
  return p.version ? `${p.name} ${p.version}` : p.name;
}

export function controlState(c: SessionControlChange['control']): Session['control'] {
  return c === 'pause' ? 'paused' : c === 'block' ? 'blocked' : 'active';
}

/** A snapshot from the API replaces what we hold only when it is at least as new. */
function newer(a: Session | undefined, b: Session): Session {
  if (!a) return b;
  return b.lastSeq >= a.lastSeq ? b : a;
}

const byLastSeqDesc = (m: Map<string, Session>) => (x: string, y: string) =>
  (m.get(y)?.lastSeq ?? 0) - (m.get(x)?.lastSeq ?? 0);

/** Merges two id lists that are each sorted newest first. */
function mergeSorted(a: string[], b: string[], m: Map<string, Session>): string[] {
  const out: string[] = new Array(a.length + b.length);
  let i = 0,
    j = 0,
    k = 0;
  while (i < a.length && j < b.length) {
    const x = a[i]!,
      y = b[j]!;
    if ((m.get(x)?.lastSeq ?? 0) >= (m.get(y)?.lastSeq ?? 0)) {
      out[k++] = x;
      i++;
    } else {
      out[k++] = y;
      j++;
    }
  }
  while (i < a.length) out[k++] = a[i++]!;
  while (j < b.length) out[k++] = b[j++]!;
  return out;
}

function cap(state: SessionsState, max: number): SessionsState {
  if (state.order.length <= max) return state;
  const dropped = state.order.slice(max);
  for (const id of dropped) state.byId.delete(id);
  return { ...state, order: state.order.slice(0, max), next: null, truncated: true };
}

/**
 * Adds a page from GET /api/sessions. `first` replaces the pagination cursor chain (a new
 * search), otherwise the page continues it.
 */
export function mergePage(
  state: SessionsState,
  sessions: Session[],
  next: string | null | undefined,
  max = 10_000,
): SessionsState {
  const byId = new Map(state.byId);
  for (const s of sessions) byId.set(s.id, newer(byId.get(s.id), s));
  const known = new Set(state.order);
  const added = sessions.filter((s) => !known.has(s.id)).map((s) => s.id);
  const changed = sessions.filter((s) => known.has(s.id)).map((s) => s.id);
  let order = state.order;
  if (changed.length) {
    const moved = new Set(changed);
    order = mergeSorted(
      order.filter((id) => !moved.has(id)),
      changed.sort(byLastSeqDesc(byId)),
      byId,
    );
  }
  order = mergeSorted(order, added.sort(byLastSeqDesc(byId)), byId);
  return cap({ byId, order, next: next || null, truncated: state.truncated, version: state.version + 1 }, max);
}

/**
 * Applies live events. `accept` decides whether a session not in the list yet joins it (the
 * list may be a search result); sessions already listed are always updated.
 */
export function applyEvents(
  state: SessionsState,
  events: LiveEvent[],
  opts: { accept?: (s: Session) => boolean; max?: number } = {},
): SessionsState {
  let byId: Map<string, Session> | null = null;
  const moved = new Set<string>();
  const m = () => (byId ??= new Map(state.byId));
  for (const e of events) {
    if (e.type === 'step') {
      const step = e.payload;
      if (!step?.sessionId) continue;
      const cur = (byId ?? state.byId).get(step.sessionId);
      if (!cur) {
        const s = applyStep(undefined, step);
        if (opts.accept && !opts.accept(s)) continue;
        m().set(s.id, s);
        moved.add(s.id);
        continue;
      }
      const s = applyStep(cur, step);
      if (s !== cur) {
        m().set(s.id, s);
        moved.add(s.id);
      }
    } else if (e.type === 'session.control') {
      const id = e.payload?.sessionId ?? e.sessionId;
      if (!id) continue;
      const cur = (byId ?? state.byId).get(id);
      if (!cur) continue;
      const control = controlState(e.payload.control);
      if (cur.control !== control) m().set(id, { ...cur, control });
    }
  }
  if (!byId) return state;
  const map: Map<string, Session> = byId;
  let order = state.order;
  if (moved.size) {
    order = mergeSorted(
      order.filter((id) => !moved.has(id)),
      [...moved].sort(byLastSeqDesc(map)),
      map,
    );
  }
  return cap({ ...state, byId: map, order, version: state.version + 1 }, opts.max ?? 10_000);
}

/** Client-side filter used by the Live page on top of the server-side search. */
export interface SessionFilter {
  text: string;
  decision: '' | 'deny' | 'modify' | 'held';
  control: '' | 'paused' | 'blocked';
}

export function matchesFilter(s: Session, f: SessionFilter, pendingHolds: number): boolean {
  if (f.text) {
    const t = f.text.toLowerCase();
    const hay = `${s.id} ${s.agentId ?? ''} ${s.agentName ?? ''} ${s.userId ?? ''}`.toLowerCase();
    if (!hay.includes(t)) return false;
  }
  if (f.decision === 'held' && pendingHolds <= 0) return false;
  if ((f.decision === 'deny' || f.decision === 'modify') && !(s.decisions?.[f.decision] ?? 0)) return false;
  if (f.control && (s.control ?? 'active') !== f.control) return false;
  return true;
}

/** Prepends items to a newest-first buffer and keeps at most `max`. */
export function pushCapped<T>(buf: T[], items: T[], max: number): T[] {
  if (items.length === 0) return buf;
  const fresh = items.slice().reverse();
  const out = fresh.length >= max ? fresh.slice(0, max) : fresh.concat(buf.slice(0, max - fresh.length));
  return out;
}

/**
 * Sessions that only their pending holds tell of. A held step is stored once it is decided, so
 * a session whose only steps are waiting for review is in no page of GET /api/sessions yet; the
 * Live page lists it from the review queue (newest hold first) until its first step is stored.
 * `known` says which sessions the list has already.
 */
export function heldOnlySessions(pending: readonly Hold[], known: (id: string) => boolean): Session[] {
  const byId = new Map<string, Session>();
  for (const h of pending) {
    if (!h.sessionId || known(h.sessionId)) continue;
    const ctx = (h.request as { params?: { context?: { agent?: { id?: unknown; name?: unknown }; user?: { id?: unknown } } } } | null)?.params?.context;
    const str = (v: unknown) => (typeof v === 'string' && v ? v : undefined);
    const cur = byId.get(h.sessionId);
    const t = Date.parse(h.createdAt);
    const newest = !cur || t >= Date.parse(cur.lastSeen);
    const oldest = !cur || t < Date.parse(cur.firstSeen);
    const s: Session = {
      id: h.sessionId,
      agentId: cur?.agentId ?? str(ctx?.agent?.id) ?? h.agentId,
      agentName: cur?.agentName ?? str(ctx?.agent?.name),
      userId: cur?.userId ?? str(ctx?.user?.id),
      firstSeen: oldest ? h.createdAt : cur.firstSeen,
      lastSeen: newest ? h.createdAt : cur.lastSeen,
      lastSeq: 0,
      steps: 0,
      decisions: {},
      lastMethod: newest ? h.method : cur.lastMethod,
      control: 'active',
      pendingHolds: (cur?.pendingHolds ?? 0) + 1,
      heldOnly: true,
    };
    byId.set(s.id, s);
  }
  return [...byId.values()].sort((a, b) => Date.parse(b.lastSeen) - Date.parse(a.lastSeen) || (a.id < b.id ? -1 : 1));
}
