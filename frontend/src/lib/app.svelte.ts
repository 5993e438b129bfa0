// The console's shared state: one live connection for the whole app, the review queue, the
// steps ticker, the latest stats, the operator's name, toasts and the operator prompt. Pages
// subscribe to the event stream for what only they need.

import { Api, ApiError, liveUrl, resolveApiBase, type DecisionBody, type Me } from './api';
import { UNDO_MS } from './decisions';
import { ClockOffset, PendingLoads, applyHoldEvents, emptyHolds, holdsBySession, type HoldsState } from './holds';
import { LiveClient, type LiveState } from './live';
import { loadOperator, saveOperator } from './operator';
import { pushCapped } from './sessions';
import type { Hold, Info, LiveEvent, Stats, Step } from './types';

export const TICKER_MAX = 200;

export { UNDO_MS };

export type DecisionAction = 'approve' | 'deny' | 'modify';

/** A decision the operator made that is not sent yet: it can still be undone. */
export interface QueuedDecision {
  id: number;
  hold: Hold;
  action: DecisionAction;
  body: DecisionBody;
  remember: boolean;
  /** Epoch ms when it is sent. */
  due: number;
  timer: ReturnType<typeof setTimeout>;
  /** The guardian refused the request (400): the page that queued it shows the message. */
  /** A 400 answer: its message and code (rules_deny: the rules would deny the edit). */
  onRefused?: (message: string, code: string) => void;
}

export const decisionVerb: Record<DecisionAction, { doing: string; done: string }> = {
  approve: { doing: 'Approving', done: 'Approved' },
  deny: { doing: 'Denying', done: 'Denied' },
  modify: { doing: 'Approving with changes', done: 'Approved with changes' },
};

export interface Toast {
  id: number;
  kind: 'ok' | 'error' | 'info';
  text: string;
}

type Listener = (events: LiveEvent[]) => void;

function storage(): Storage | undefined {
  try {
    return globalThis.localStorage;
  } catch {
    return undefined;
  }
}

function notificationsSupported(): boolean {
  return typeof globalThis.Notification === 'function';
}

const RANK: Record<string, number> = { viewer: 1, reviewer: 2, admin: 3 };

class ConsoleState {
  readonly api: Api;
  private started = false;
  private readonly live: LiveClient;
  private readonly listeners = new Set<Listener>();
  private readonly openListeners = new Set<() => void>();
  private readonly clock = new ClockOffset();
  private readonly startedAt = Date.now();
  private toastId = 0;
  private operatorWaiters: ((name: string | null) => void)[] = [];

  liveState = $state<LiveState>({ status: 'stopped', lastSeq: 0, attempt: 0, retryAt: null, reason: '', downSince: null });
  info = $state.raw<Info | null>(null);
  holds = $state.raw<HoldsState>(emptyHolds());
  holdsLoaded = $state(false);
  /** Why the last load of the queue failed; '' once it loaded. */
  holdsError = $state('');
  holdsLoading = $state(false);
  /** The queue's loads: an older answer never replaces a newer one (lib/holds). */
  private readonly pendingLoads = new PendingLoads();
  /** Decisions waiting out their undo window, oldest first. */
  queued = $state.raw<QueuedDecision[]>([]);
  /** Holds this console decided (sent), so the queue may move on from them. */
  decidedHere = $state.raw<ReadonlySet<string>>(new Set());
  private queueId = 0;
  /** Decisions sent and not answered yet. */
  private readonly sending = new Set<Promise<void>>();
  /**
   * Asked before the route changes (target hash) or the page unloads (null): false keeps the
   * page, which then asks the operator itself. The rule editor sets it while it has a draft.
   */
  leaveGuard: ((target: string | null) => boolean) | null = null;
  ticker = $state.raw<Step[]>([]);
  /** Steps per second over the last 10 s, from the ticker (capped, so a lower bound at high rates). */
  rate = $derived.by(() => {
    const cutoff = this.serverNow() - 10_000;
    let n = 0;
    for (const s of this.ticker) {
      if (Date.parse(s.receivedAt) < cutoff) break;
      n++;
    }
    return n / 10;
  });
  stats = $state.raw<Stats | null>(null);
  statsError = $state('');
  /** Latency history from stats ticks, for the overview sparkline. */
  latencyHistory = $state.raw<{ t: number; p50: number; p99: number }[]>([]);
  /** Local time, refreshed every second: drives countdowns and relative times. */
  now = $state(Date.now());
  operator = $state(loadOperator(storage()));
  askingOperator = $state(false);
  toasts = $state<Toast[]>([]);
  notifyPermission = $state<NotificationPermission | 'unsupported'>(
    notificationsSupported() ? Notification.permission : 'unsupported',
  );

  heldBySession = $derived(holdsBySession(this.holds.pending));

  /** Team mode: 'open' when the console needs no sign-in, 'needed' shows the sign-in page. */
  auth = $state<'checking' | 'open' | 'signedIn' | 'needed'>('checking');
  me = $state.raw<Me | null>(null);

  constructor() {
    const base = resolveApiBase(location, globalThis as { __VIGIL_API__?: unknown });
    this.api = new Api(base);
    this.live = new LiveClient({
      url: liveUrl(base, location),
      onEvents: (evs) => this.onEvents(evs),
      onState: (s) => {
        const was = this.liveState.status;
        this.liveState = s;
        // Back online: what failed to load while the guardian was away loads again. The queue,
        // and the pages that follow the stream (onLiveOpen), load again on every
        // (re)connection: the first connection starts live, so a hold or step stored between
        // the first load's answer and the stream's opening would otherwise never show
        // (setPending, and lib/liveload for the pages, keep what arrives live meanwhile).
        if (s.status === 'open' && was !== 'open' && this.started) {
          void this.refreshHolds();
          if (this.statsError && !this.stats) void this.refreshStats();
          for (const fn of this.openListeners) {
            try {
              fn();
            } catch (err) {
              console.error('live open listener failed', err);
            }
          }
        }
        // A browser does not tell a websocket refused with 401 from a dropped one: after a
        // second failed attempt in a row, ask whether the session still stands (an account
        // removed, or sign-in turned on by a first account), so the console shows sign-in
        // rather than reconnecting for ever.
        if (s.status === 'waiting' && s.attempt === 2 && this.started) void this.recheck();
      },
    });
  }

  /** Finds out whether the console needs a sign-in, then starts the live stream. */
  async boot(): Promise<void> {
    setInterval(() => (this.now = Date.now()), 1000);
    this.api.onUnauthenticated = () => {
      if (this.auth === 'signedIn' || this.auth === 'open') this.toast('Your session ended: sign in again', 'info');
      this.auth = 'needed';
      this.live.stop();
      this.started = false;
    };
    this.api.operator = this.operator;
    try {
      this.applyMe(await this.api.me());
    } catch (err) {
      // 401: accounts exist and nobody is signed in. A guardian without team mode has no
      // /api/auth/me at all: the console is open.
      if (err instanceof ApiError && err.status === 401) {
        this.auth = 'needed';
        return;
      }
      this.auth = 'open';
    }
    this.start();
  }

  private applyMe(me: Me) {
    this.me = me;
    this.api.csrfToken = me.csrfToken ?? '';
    if (me.authRequired) {
      this.auth = 'signedIn';
      this.operator = me.name;
      this.api.operator = me.name;
    } else this.auth = 'open';
  }

  async signIn(name: string, password: string): Promise<void> {
    this.applyMe(await this.api.login(name, password));
    this.start();
  }

  /**
   * Ends the session. Decisions still in their undo window are the caller's to send or take
   * back first (the Sign out button asks); one already on its way is waited for, so the
   * guardian gets it before the sign-out.
   */
  async signOut(): Promise<void> {
    await Promise.allSettled([...this.sending]);
    try {
      await this.api.logout();
    } finally {
      this.live.stop();
      this.started = false;
      this.me = null;
      this.api.csrfToken = '';
      this.auth = 'needed';
    }
  }

  /**
   * Asks the guardian again who is signed in: a 401 ends the session on screen (through
   * onUnauthenticated, as any other request would), and sign-in turned on in the open
   * console (a first account added) brings the sign-in page. Network errors change nothing.
   */
  async recheck(): Promise<void> {
    try {
      const me = await this.api.me();
      if (me.authRequired && this.auth === 'open') {
        // Sign-in was turned on by a first account: this browser has no session.
        this.toast('Sign-in is on now: sign in with an account', 'info');
        this.live.stop();
        this.started = false;
        this.auth = 'needed';
        return;
      }
      this.applyMe(me);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401 && this.auth !== 'needed') this.api.onUnauthenticated?.();
    }
  }

  /** Whether the signed-in operator's role allows an action (always, in the open console). */
  can(role: 'viewer' | 'reviewer' | 'admin'): boolean {
    if (this.auth !== 'signedIn') return true;
    return (RANK[this.me?.role ?? ''] ?? 0) >= RANK[role]!;
  }

  /** Says what the signed-in role cannot do, in place of the controls it would need. */
  roleNote(role: 'reviewer' | 'admin', what: string): string {
    return `Signed in as ${this.me?.role ?? 'viewer'}: to ${what} needs ${role}.`;
  }

  /** Like can(), and tells the operator when their role is not enough. */
  allowed(role: 'reviewer' | 'admin'): boolean {
    if (this.can(role)) return true;
    this.toast(`Your role (${this.me?.role ?? 'none'}) cannot do this: it needs ${role}.`, 'error');
    return false;
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.live.start();
    void this.refreshInfo();
    void this.refreshHolds();
    void this.refreshStats();
  }

  async refreshStats(): Promise<void> {
    try {
      const s = await this.api.stats();
      this.stats ??= s;
      this.statsError = '';
    } catch (err) {
      this.statsError = err instanceof Error ? err.message : String(err);
    }
  }

  reconnect(): void {
    this.live.reconnectNow();
  }

  /** Server time now, for countdowns against server deadlines. */
  serverNow(): number {
    return this.clock.serverNow(this.now);
  }

  async refreshInfo(): Promise<void> {
    try {
      this.info = await this.api.info();
    } catch {
      /* the status indicator already says the guardian is unreachable */
    }
  }

  async refreshHolds(): Promise<void> {
    this.holdsLoading = true;
    try {
      // Holds that arrive live while the request is on its way are newer than its answer, and
      // so is the answer of a load started after it (null: that one answered first).
      const r = await this.pendingLoads.run(() => this.holds, () => this.api.holds('pending'));
      if (!r) return;
      // The server's clock, for countdowns against its deadlines.
      if (r.now) this.clock.observe(r.now, Date.now());
      this.holds = r.state;
      this.holdsLoaded = true;
      this.holdsError = '';
    } catch (err) {
      // The Held page shows this in place of the queue: an empty list would read "all clear".
      this.holdsError = err instanceof Error ? err.message : String(err);
    } finally {
      this.holdsLoading = this.pendingLoads.busy;
    }
  }

  // ---- decisions, with an undo window ----

  /**
   * Queues a decision on a hold: it is sent after UNDO_MS unless undone. A hold whose deadline
   * comes before the undo window ends is decided at once ('now'). A hold that already has a
   * queued decision is left alone ('duplicate').
   */
  queueDecision(
    hold: Hold,
    action: DecisionAction,
    body: DecisionBody,
    remember: boolean,
    onRefused?: (message: string, code: string) => void,
  ): 'queued' | 'now' | 'duplicate' {
    if (this.queued.some((q) => q.hold.id === hold.id)) return 'duplicate';
    const id = ++this.queueId;
    // The countdown of the undo window starts from now, not from the last second's tick.
    this.now = Date.now();
    const left = Date.parse(hold.deadline) - this.serverNow();
    const now = !Number.isNaN(left) && left < UNDO_MS + 1500;
    const q: QueuedDecision = {
      id,
      hold,
      action,
      body,
      remember,
      due: Date.now() + (now ? 0 : UNDO_MS),
      timer: setTimeout(() => void this.sendDecision(id), now ? 0 : UNDO_MS),
      ...(onRefused ? { onRefused } : {}),
    };
    this.queued = [...this.queued, q];
    return now ? 'now' : 'queued';
  }

  /** Takes a queued decision back; nothing reaches the agent. */
  undoDecision(id?: number): void {
    const q = id === undefined ? this.queued.at(-1) : this.queued.find((x) => x.id === id);
    if (!q) return;
    clearTimeout(q.timer);
    this.queued = this.queued.filter((x) => x.id !== q.id);
    this.toast(`Undone: ${q.hold.tool || q.hold.method} is still waiting for review`, 'info');
  }

  /** Sends a queued decision before its undo window ends. */
  sendDecisionNow(id: number): void {
    const q = this.queued.find((x) => x.id === id);
    if (!q) return;
    clearTimeout(q.timer);
    void this.sendDecision(id);
  }

  /** Sends every decision still in its undo window now; resolves once the guardian answered each. */
  async sendAllDecisionsNow(): Promise<void> {
    const ids = this.queued.map((q) => {
      clearTimeout(q.timer);
      return q.id;
    });
    await Promise.all(ids.map((id) => this.sendDecision(id)));
  }

  /** Takes back every decision still in its undo window. */
  undoAllDecisions(): void {
    for (const q of this.queued) this.undoDecision(q.id);
  }

  private sendDecision(id: number): Promise<void> {
    const p = this.deliverDecision(id).finally(() => this.sending.delete(p));
    this.sending.add(p);
    return p;
  }

  private async deliverDecision(id: number): Promise<void> {
    const q = this.queued.find((x) => x.id === id);
    if (!q) return;
    this.queued = this.queued.filter((x) => x.id !== id);
    const h = q.hold;
    try {
      const res = await this.api.decide(h.id, q.action, q.body);
      this.toast(`${decisionVerb[q.action].done}: ${h.tool || h.method}${q.remember ? ' · remembered' : ''}`, 'ok');
      this.decidedHere = new Set([...this.decidedHere, h.id].slice(-200));
      const status = q.action === 'deny' ? 'denied' : q.action === 'modify' ? 'modified' : 'approved';
      this.holds = {
        pending: this.holds.pending.filter((x) => x.id !== h.id),
        recent: [res ?? { ...h, status }, ...this.holds.recent.filter((x) => x.id !== h.id)].slice(0, 50),
      };
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        this.toast(`Not sent, already decided: ${err.message}`, 'info', 7000);
        void this.refreshHolds();
      } else if (err instanceof ApiError && err.status === 400 && q.onRefused) {
        q.onRefused(err.message, err.code);
      } else this.toast(`${decisionVerb[q.action].doing} ${h.tool || h.method} failed: ${err instanceof Error ? err.message : String(err)}`, 'error', 9000);
    }
  }

  subscribe(fn: Listener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * fn runs each time the live stream opens (the first time and after every reconnection),
   * before any event of that connection is handed to subscribers: a page loads again then
   * what the stream may have missed (lib/liveload).
   */
  onLiveOpen(fn: () => void): () => void {
    this.openListeners.add(fn);
    return () => this.openListeners.delete(fn);
  }

  private onEvents(events: LiveEvent[]): void {
    const local = Date.now();
    const steps: Step[] = [];
    for (const e of events) {
      this.clock.observe(e.at, local);
      if (e.type === 'step' && e.payload) steps.push(e.payload);
      else if (e.type === 'stats' && e.payload) {
        this.stats = e.payload;
        this.statsError = '';
        this.latencyHistory = [
          ...this.latencyHistory.slice(-359),
          { t: Date.parse(e.at) / 1000 || local / 1000, p50: e.payload.latency?.p50Micros ?? 0, p99: e.payload.latency?.p99Micros ?? 0 },
        ];
      } else if (e.type === 'hold.created' && e.payload) this.notifyHold(e.payload);
    }
    if (steps.length) {
      this.ticker = pushCapped(this.ticker, steps, TICKER_MAX);
    }
    for (const e of events) {
      if (e.type !== 'hold.resolved' || !e.payload) continue;
      const q = this.queued.find((x) => x.hold.id === e.payload.id);
      if (!q) continue;
      clearTimeout(q.timer);
      this.queued = this.queued.filter((x) => x.id !== q.id);
      const why = e.payload.status === 'timedOut' ? 'it timed out' : `it was decided${e.payload.decidedBy ? ` by ${e.payload.decidedBy}` : ''}`;
      this.toast(`Your decision on ${q.hold.tool || q.hold.method} was not sent: ${why} first`, 'error', 9000);
    }
    const holds = applyHoldEvents(this.holds, events);
    if (holds !== this.holds) this.holds = holds;
    for (const fn of this.listeners) {
      try {
        fn(events);
      } catch (err) {
        console.error('live listener failed', err);
      }
    }
  }

  // ---- operator identity ----

  /** The operator's name, asking once (a modal) when it is not known yet; null if cancelled. */
  requireOperator(): Promise<string | null> {
    if (this.auth === 'signedIn' && this.me?.name) return Promise.resolve(this.me.name);
    if (this.operator) return Promise.resolve(this.operator);
    this.askingOperator = true;
    return new Promise((resolve) => this.operatorWaiters.push(resolve));
  }

  setOperator(name: string | null): void {
    if (name !== null) {
      this.operator = saveOperator(storage(), name);
      this.api.operator = this.operator;
    }
    this.askingOperator = false;
    const waiters = this.operatorWaiters;
    this.operatorWaiters = [];
    for (const w of waiters) w(name === null ? null : this.operator || null);
  }

  changeOperator(): void {
    if (this.auth !== 'signedIn') this.askingOperator = true;
  }

  // ---- toasts ----

  toast(text: string, kind: Toast['kind'] = 'info', ms = 4000): void {
    const id = ++this.toastId;
    this.toasts = [...this.toasts.slice(-3), { id, kind, text }];
    setTimeout(() => (this.toasts = this.toasts.filter((t) => t.id !== id)), ms);
  }

  error(err: unknown): void {
    const text = err instanceof ApiError || err instanceof Error ? err.message : String(err);
    this.toast(text, 'error', 7000);
  }

  // ---- desktop notifications ----

  async enableNotifications(): Promise<void> {
    if (!notificationsSupported()) return;
    this.notifyPermission = await Notification.requestPermission();
    if (this.notifyPermission === 'granted') this.toast('Desktop notifications are on for new holds', 'ok');
  }

  private notifyHold(h: Hold): void {
    if (this.notifyPermission !== 'granted') return;
    // Replayed events after a reconnect are not news.
    const created = Date.parse(h.createdAt);
    if (!Number.isNaN(created) && created < this.startedAt - 5000) return;
    try {
      const n = new Notification('Vigil: a step is waiting for review', {
        body: `${h.tool || h.method} in session ${h.sessionId}${h.message ? `\n${h.message}` : ''}`,
        tag: `vigil-hold-${h.id}`,
      });
      n.onclick = () => {
        window.focus();
        location.hash = '#/held';
        n.close();
      };
    } catch {
      /* some embedders refuse notifications; the Held badge still shows */
    }
  }
}

export const app = new ConsoleState();
