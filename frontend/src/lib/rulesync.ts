// The rule editor and the rule.changed events: which events are about the open rule, and what
// they mean for the draft. Every change of the rule set publishes one (guardian/rulesapi):
// create, update, enable, disable and restore carry the rule as saved; a delete names it; a
// reload (an import, the rules file read again, the undo of a change the engine refused) only
// lists the ids it touched, so the editor reads the rule to know what happened to it.

import type { Rule, RuleChange } from './types';

/** The ids of the rules an event is about. */
export function changedIds(p: RuleChange | null | undefined): string[] {
  if (!p) return [];
  const ids = [...(p.ruleIds ?? [])];
  const one = p.ruleId || p.rule?.id;
  if (one && !ids.includes(one)) ids.push(one);
  return ids;
}

export type OpenRuleChange =
  /** Not about the open rule, or no newer than the version the draft is based on. */
  | { kind: 'none' }
  | { kind: 'deleted' }
  /** The rule as saved by the change. */
  | { kind: 'changed'; rule: Rule }
  /** The event only names the rule (a reload): read it to know whether and how it changed. */
  | { kind: 'read' };

/** Whether r is a newer version of the rule than base. */
export function isNewer(r: Rule, base: Rule): boolean {
  return r.id === base.id && (r.version ?? 0) > (base.version ?? 0);
}

/** What an event means for the open rule, whose draft is based on `open`. */
export function openRuleChange(p: RuleChange | null | undefined, open: Rule): OpenRuleChange {
  if (!p || !changedIds(p).includes(open.id)) return { kind: 'none' };
  if (p.op === 'delete') return { kind: 'deleted' };
  if (p.rule) return isNewer(p.rule, open) ? { kind: 'changed', rule: p.rule } : { kind: 'none' };
  return { kind: 'read' };
}
