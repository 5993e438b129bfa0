// The one decision path for held steps, wherever they are decided (the Held page, a session's
// timeline): a rule with hold.confirm asks for an explicit confirmation first, then the
// decision waits out the undo window in app.queued (app.queueDecision) before the agent is
// answered. Both pages render the same confirmation and undo panels from this state, so a hold
// is decided the same way on either.

import type { Remember } from './api';
import { app, UNDO_MS, type DecisionAction } from './app.svelte';
import { needsConfirmation } from './decisions';
import type { Hold, Rule } from './types';

export interface DecisionOptions {
  note?: string;
  /** The edited params (modify). */
  params?: unknown;
  /** Sends an edit the rules would deny (modify). */
  override?: boolean;
  /** Approve and remember. */
  remember?: Remember;
  /** The guardian refused the request (400): its message and code. */
  onRefused?: (message: string, code: string) => void;
}

/** An approval waiting for its explicit confirmation (hold.confirm). */
export interface Confirming {
  holdId: string;
  action: DecisionAction;
  options: DecisionOptions;
}

export type DecideResult = 'confirm' | 'queued' | 'now' | 'duplicate' | 'cancelled' | 'forbidden';

class Review {
  /** The rules as they are now: hold.confirm is read from them, and edits are checked with them. */
  rules = $state.raw<Rule[]>([]);
  rulesLoaded = $state(false);
  /** Bumped when the rules are reloaded. */
  rulesVersion = $state(0);
  confirming = $state.raw<Confirming | null>(null);
  private loading: Promise<void> | null = null;
  private generation = 0;
  private users = 0;
  private off: (() => void) | null = null;

  /** Keeps the rules loaded and fresh while a page that decides is mounted (its onMount). */
  use(): () => void {
    if (this.users++ === 0) {
      void this.loadRules();
      this.off = app.subscribe((events) => {
        if (events.some((e) => e.type === 'rule.changed')) void this.loadRules(true);
      });
    }
    return () => {
      if (--this.users === 0) {
        this.off?.();
        this.off = null;
        // Rules may change while no page watches them: the next page loads them again.
        this.rulesLoaded = false;
      }
    };
  }

  /** Loads the rules (once at a time); without them no hold asks for confirmation. */
  loadRules(force = false): Promise<void> {
    if (this.loading && !force) return this.loading;
    const gen = ++this.generation;
    const p = this.fetchRules(gen).finally(() => {
      if (this.generation === gen) this.loading = null;
    });
    this.loading = p;
    return p;
  }

  private async fetchRules(gen: number): Promise<void> {
    try {
      const rules = (await app.api.rules()).rules ?? [];
      // A newer load (the rules changed meanwhile) wins.
      if (gen !== this.generation) return;
      this.rules = rules;
      this.rulesLoaded = true;
      this.rulesVersion++;
    } catch {
      /* the queue itself still works; an edit says its check could not run */
    }
  }

  needsConfirm(h: Hold | null | undefined): boolean {
    return needsConfirmation(h, this.rules);
  }

  /**
   * Decides a hold: 'confirm' when its rule wants an explicit confirmation first (then
   * `confirming` is set and the page shows the panel; its Confirm calls this again with
   * confirmed), else the decision is queued for the undo window ('now' when the hold times out
   * before the window would end: sent at once, and the operator is told there is no undo).
   */
  async decide(h: Hold, action: DecisionAction, options: DecisionOptions = {}, confirmed = false): Promise<DecideResult> {
    if (!app.allowed('reviewer')) return 'forbidden';
    if (app.queued.some((q) => q.hold.id === h.id)) return 'duplicate';
    if (action !== 'deny' && !confirmed) {
      // A decision taken before the rules arrived must still ask when its rule says so.
      if (!this.rulesLoaded) await this.loadRules();
      if (this.needsConfirm(h)) {
        this.confirming = { holdId: h.id, action, options };
        return 'confirm';
      }
    }
    this.confirming = null;
    const operator = await app.requireOperator();
    if (!operator) return 'cancelled';
    const remember = action === 'approve' && !!options.remember;
    const body = {
      operator,
      note: (options.note ?? '').trim(),
      ...(action === 'modify' ? { params: options.params, ...(options.override ? { override: true } : {}) } : {}),
      ...(remember ? { remember: options.remember } : {}),
    };
    const how = app.queueDecision(h, action, body, remember, options.onRefused);
    if (how === 'now') app.toast(`Sent at once, without undo: ${h.tool || h.method} times out in less than ${UNDO_MS / 1000} s`, 'info');
    return how;
  }

  /** Sends the approval waiting for confirmation. */
  confirm(h: Hold): Promise<DecideResult> | null {
    const c = this.confirming;
    if (!c || c.holdId !== h.id) return null;
    return this.decide(h, c.action, c.options, true);
  }

  cancelConfirm(): void {
    this.confirming = null;
  }
}

export const review = new Review();
