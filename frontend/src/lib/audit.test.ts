import { describe, expect, it } from 'vitest';
import { interruptedLabel } from './audit';

describe('interruptedLabel', () => {
  it.each([
    [undefined, 'Hold interrupted by a restart'],
    [{ reason: 'shutdown' }, 'Hold interrupted by a shutdown'],
    [{ reason: 'not recorded', status: 'timedOut', decision: 'allow' }, 'Hold end not recorded: agent denied'],
    [{ reason: 'no heartbeat before the answer' }, 'Hold interrupted'],
  ])('says why a hold was interrupted (%j)', (detail, want) => {
    expect(interruptedLabel({ type: 'hold.interrupted', detail })).toBe(want);
  });
  it('leaves other entries to their type label', () => {
    expect(interruptedLabel({ type: 'hold.approved' })).toBeUndefined();
  });
});
