// Pure helpers of the decision flow shared by the Held and Session pages (the store that runs
// it is review.svelte.ts): the undo window and whether a hold needs an explicit confirmation.

import type { Hold, Rule } from './types';

/** How long a decision waits, undoable, before the agent is answered. */
export const UNDO_MS = 5000;

/**
 * Whole seconds until a queued decision is sent, for "the agent is answered in N s": rounded
 * up, and never more than the undo window (the page's clock ticks once a second, so it may
 * lag the moment the decision was queued by almost a second).
 */
export function undoSecondsLeft(due: number, now: number): number {
  return Math.min(UNDO_MS / 1000, Math.max(0, Math.ceil((due - now) / 1000)));
}

/**
 * A hold whose rule has hold.confirm: an approval needs a second, explicit step. The flag is
 * read from the rule as it is now (the stored hold does not carry it).
 */
export function needsConfirmation(hold: Pick<Hold, 'ruleId'> | null | undefined, rules: readonly Rule[]): boolean {
  if (!hold?.ruleId) return false;
  return !!rules.find((r) => r.id === hold.ruleId)?.hold?.confirm;
}
