import { describe, expect, it } from 'vitest';
import { UNDO_MS, needsConfirmation, undoSecondsLeft } from './decisions';
import type { Rule } from './types';

describe('undoSecondsLeft', () => {
  it('never says more than the undo window, though the page clock lags by up to a second', () => {
    const queuedAt = 10_000;
    const due = queuedAt + UNDO_MS;
    // The page's clock last ticked 999 ms before the decision was queued.
    expect(undoSecondsLeft(due, queuedAt - 999)).toBe(5);
    expect(undoSecondsLeft(due, queuedAt)).toBe(5);
    expect(undoSecondsLeft(due, queuedAt + 1)).toBe(5);
    expect(undoSecondsLeft(due, queuedAt + 1000)).toBe(4);
    expect(undoSecondsLeft(due, due - 1)).toBe(1);
    expect(undoSecondsLeft(due, due)).toBe(0);
    expect(undoSecondsLeft(due, due + 5000)).toBe(0);
  });
});

describe('needsConfirmation', () => {
  const rules: Rule[] = [
    { id: 'wire', when: 'true', action: 'hold', hold: { confirm: true } },
    { id: 'big', when: 'true', action: 'hold', hold: { timeout: '2m' } },
  ];
  it('reads hold.confirm from the rule as it is now', () => {
    expect(needsConfirmation({ ruleId: 'wire' }, rules)).toBe(true);
    expect(needsConfirmation({ ruleId: 'big' }, rules)).toBe(false);
    expect(needsConfirmation({ ruleId: 'gone' }, rules)).toBe(false);
    // A paused session's hold names no rule.
    expect(needsConfirmation({}, rules)).toBe(false);
    expect(needsConfirmation(null, rules)).toBe(false);
  });
});
