import { describe, expect, it } from 'vitest';
import { changedIds, openRuleChange } from './rulesync';
import type { Rule, RuleChange } from './types';

const open: Rule = { id: 'external-email', when: 'tool == "send_email"', action: 'deny', version: 1 };
const rule = (version: number, id = open.id): Rule => ({ ...open, id, version, message: `v${version}` });

// The payloads as the guardian publishes them (record.RuleChangedPayload, guardian/rulesapi).
describe('openRuleChange', () => {
  it('an import or reload names the rules in ruleIds only: the open rule is read again', () => {
    const reload: RuleChange = { op: 'reload', rule: null, ruleId: '', ruleIds: ['big-transfer', 'external-email'] };
    expect(changedIds(reload)).toEqual(['big-transfer', 'external-email']);
    expect(openRuleChange(reload, open)).toEqual({ kind: 'read' });
    expect(openRuleChange({ ...reload, ruleIds: ['big-transfer'] }, open)).toEqual({ kind: 'none' });
  });
  it('create, update, enable, disable and restore carry the rule: newer than the draft’s base is a change', () => {
    for (const op of ['create', 'update', 'enable', 'disable', 'restore']) {
      expect(openRuleChange({ op, rule: rule(2), ruleId: open.id }, open)).toEqual({ kind: 'changed', rule: rule(2) });
      // Not newer (the draft is based on it already, or an event late after a save here): nothing.
      expect(openRuleChange({ op, rule: rule(1), ruleId: open.id }, open)).toEqual({ kind: 'none' });
      expect(openRuleChange({ op, rule: rule(2, 'other'), ruleId: 'other' }, open)).toEqual({ kind: 'none' });
    }
  });
  it('a delete names the rule', () => {
    expect(openRuleChange({ op: 'delete', rule: null, ruleId: open.id }, open)).toEqual({ kind: 'deleted' });
    expect(openRuleChange({ op: 'delete', rule: null, ruleId: 'other' }, open)).toEqual({ kind: 'none' });
  });
});
