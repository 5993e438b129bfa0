// What the audit log's list says about an entry beside its type.

import type { AuditEntry } from './types';

/**
 * The Note column: the operator's note, else what the entry's diff is. Only a hold approved
 * with changes (hold.modified) has params an operator edited; a plain approval's diff is the
 * rules' own modifications applied to the step, and a rule change's diff is the rule's.
 */
export function auditNote(e: Pick<AuditEntry, 'type' | 'note' | 'diff'>): string {
  if (e.note) return e.note;
  if (!e.diff || (Array.isArray(e.diff) && e.diff.length === 0)) return '';
  if (e.type === 'hold.modified') return 'params edited';
  if (e.type === 'hold.approved') return "rules' modifications applied";
  return '';
}

/** The heading over an entry's diff in its detail. */
export function auditDiffLabel(type: string): string {
  if (type.startsWith('rule.')) return 'Change to the rule';
  if (type === 'hold.modified') return 'Params edited by the operator';
  if (type === 'hold.approved') return 'Modifications the rules applied';
  return 'Change';
}

/**
 * The label of a hold.interrupted entry, which says why from its detail's reason (the
 * entries a restart writes have none); undefined for any other entry.
 */
export function interruptedLabel(e: { type: string; detail?: unknown }): string | undefined {
  if (e.type !== 'hold.interrupted') return undefined;
  const reason = e.detail && typeof e.detail === 'object' ? (e.detail as { reason?: unknown }).reason : undefined;
  switch (reason) {
    case undefined:
      return 'Hold interrupted by a restart';
    case 'shutdown':
      return 'Hold interrupted by a shutdown';
    case 'not recorded':
      return 'Hold end not recorded: agent denied';
    default:
      return 'Hold interrupted';
  }
}
