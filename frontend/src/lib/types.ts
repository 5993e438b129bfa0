// Wire types of the guardian's HTTP API and live stream (see the team contract).

export type Decision = 'allow' | 'deny' | 'modify' | string;
export type Control = 'active' | 'paused' | 'blocked';
export type Kind =
  | 'trigger'
  | 'message'
  | 'knowledge'
  | 'memoryStore'
  | 'memoryRetrieval'
  | 'toolCall'
  | 'toolResult'
  | 'mcp'
  | 'a2a'
  | 'ping'
  | string;

export interface Session {
  id: string;
  agentId?: string;
  agentName?: string;
  userId?: string;
  firstSeen: string;
  lastSeen: string;
  lastSeq: number;
  steps: number;
  decisions: Record<string, number>;
  lastMethod?: string;
  control?: Control;
  pendingHolds?: number;
  /** The client and server of a gateway session as they name themselves (MCP clientInfo and
   * serverInfo); absent for other sessions. */
  client?: Peer;
  server?: Peer;
  /** Console only: a session known from its pending holds alone (nothing of it stored yet). */
  heldOnly?: boolean;
}

/** A program at one end of a gateway session (an MCP Implementation). */
export interface Peer {
  name: string;
  version?: string;
}

export interface RuleMatch {
  ruleId: string;
  action: string;
  mode: string;
  reasonCode?: string;
  error?: string;
}

export interface Step {
  seq: number;
  sessionId: string;
  turnId?: string;
  stepId?: string;
  method: string;
  kind: Kind;
  agentId?: string;
  agentName?: string;
  userId?: string;
  tool?: string;
  decision: Decision;
  receivedAt: string;
  request: unknown;
  response: unknown;
  matchedRules: RuleMatch[] | null;
  latencyMicros: number;
  text?: string;
  held?: boolean;
  /** The client and server of the gateway session the step came through (MCP). */
  client?: Peer;
  server?: Peer;
  /** Set on a big step as the live stream sends it: request and response left out, text cut.
   * GET /api/steps/{seq} has the whole step. */
  truncated?: boolean;
}

export type HoldStatus = 'pending' | 'approved' | 'denied' | 'modified' | 'timedOut' | 'abandoned' | 'interrupted';

export interface Hold {
  id: string;
  seq: number;
  sessionId: string;
  agentId?: string;
  method: string;
  kind?: Kind;
  tool?: string;
  ruleId?: string;
  message?: string;
  request: unknown;
  createdAt: string;
  deadline: string;
  onTimeout?: string;
  status: HoldStatus;
  /** The answer the agent got (allow, deny, modify); empty while pending. */
  decision?: string;
  decidedBy?: string;
  decidedAt?: string;
  note?: string;
}

/** GET /api/steps/{seq}/hold: the hold of a held step and its audit entries, oldest first. */
export interface StepHold {
  hold: Hold;
  audit: AuditEntry[];
}

export interface RuleStats {
  evaluations: number;
  matches: number;
  errors: number;
  avgMicros: number;
  /** The most recent run-time error, e.g. "evaluation budget exceeded (ran longer than 100ms) (1:19)". */
  lastError?: string;
  lastErrorAt?: string;
}

export type RuleAction = 'allow' | 'deny' | 'modify' | 'hold';
export type RuleMode = 'enforce' | 'monitor' | 'off';

export interface Rule {
  id: string;
  name?: string;
  description?: string;
  when: string;
  action: RuleAction;
  message?: string;
  reasonCode?: string;
  priority?: number;
  mode?: RuleMode;
  enabled?: boolean;
  /** confirm: approving needs a second, explicit step in the console. */
  hold?: { timeout?: string; onTimeout?: string; confirm?: boolean } | null;
  modify?: { redact?: string[]; set?: Record<string, string> } | null;
  expiresAt?: string | null;
  version?: number;
  updatedAt?: string;
  stats?: RuleStats;
  /** The rule is in the --rules file: the next start or reload overwrites console edits. */
  fromFile?: boolean;
}

export interface RuleVersion {
  version: number;
  rule: Rule;
  savedAt: string;
  operator?: string;
}

export interface ValidationError {
  field?: string;
  line?: number;
  column?: number;
  message: string;
}

export interface ValidateResult {
  ok: boolean;
  errors: ValidationError[] | null;
}

export interface TestResult {
  decision: Decision;
  ruleId?: string;
  message?: string;
  reasonCode?: string[] | null;
  matches?: RuleMatch[] | null;
  modifiedRequest?: unknown;
}

export interface BacktestExample {
  seq: number;
  method: string;
  sessionId: string;
  tool?: string;
  /** The current rules' decision. */
  before: Decision;
  /** The draft's decision. */
  after: Decision;
  /** The decision the step was given when it arrived. */
  stored?: Decision;
  rules?: string[] | null;
}

/** Why a stored decision differs from the current rules' decision. */
export type OutsideReason = 'sessionBlocked' | 'sessionPaused' | 'rememberedApproval' | 'held' | 'rulesChanged';

export interface OutsideExample {
  seq: number;
  method: string;
  sessionId: string;
  tool?: string;
  stored: Decision;
  held?: boolean;
  baseline: Decision;
  reason: OutsideReason;
  ruleId?: string;
}

export interface BacktestResult {
  evaluated: number;
  /** Steps the draft decides differently from the current rules. */
  changed: number;
  byChange: Record<string, number> | null;
  examples: BacktestExample[] | null;
  decisions?: Record<string, number> | null;
  baselineDecisions?: Record<string, number> | null;
  /** Stored decisions the current rules would not reach, for reasons outside the draft. */
  outsideRules?: { total: number; byReason: Partial<Record<OutsideReason, number>> | null; examples: OutsideExample[] | null };
  skipped?: number;
  ruleErrors?: number;
}

export interface MinuteStats {
  minute: string;
  allow: number;
  deny: number;
  modify: number;
  hold: number;
}

/** One webhook target's delivery state (GET /api/webhooks). */
export interface WebhookTarget {
  name: string;
  url: string;
  events: string[];
  format: string;
  delivered: number;
  failed: number;
  dropped: number;
  retries: number;
  queued: number;
  lastStatus?: number;
  lastError?: string;
  lastErrorAt?: string;
  lastSuccessAt?: string;
}

export interface Stats {
  steps: number;
  sessions: number;
  perMinute: MinuteStats[] | null;
  topRules: { ruleId: string; matches: number }[] | null;
  topTools: { tool: string; count: number }[] | null;
  /** The guardian's own decision time, over steps no person reviewed. */
  latency: { p50Micros: number; p99Micros: number };
  /** Held steps among the recent ones, and how long they waited for their outcome. */
  review?: { held: number; p50Micros: number; p99Micros: number };
  pendingHolds: number;
}

export interface AuditEntry {
  id: string | number;
  seq: number;
  at: string;
  type: string;
  operator?: string;
  sessionId?: string;
  holdId?: string;
  ruleId?: string;
  decision?: string;
  note?: string;
  diff?: unknown;
  detail?: unknown;
}

/** One step found by GET /api/search: its summary and a snippet of its text. */
export interface SearchHit {
  seq: number;
  sessionId: string;
  turnId: string;
  stepId: string;
  method: string;
  kind: string;
  agentId: string;
  agentName: string;
  userId: string;
  tool: string;
  decision: string;
  held: boolean;
  receivedAt: string;
  snippet: string;
}

export interface SearchPage {
  steps: SearchHit[];
  next: number | null;
  /** The newest stored steps the index has not reached yet. */
  indexLag: number;
}

/** An operator's comment on a session, or on one of its steps (stepSeq). */
export interface Comment {
  id: number;
  seq: number;
  at: string;
  operator: string;
  sessionId: string;
  stepSeq?: number;
  text: string;
}

export interface Info {
  version: string;
  aosEndpoint: string;
  db?: string;
  rulesFile?: string;
}

/**
 * The payload of a rule.changed event (record.RuleChangedPayload). One change of one rule names
 * it in ruleId, with the rule as saved (null for a delete). A reload (an import, POST
 * /api/rules/reload, SIGHUP, the undo of a change the engine refused) is one event for the whole
 * batch: ruleId is empty, rule null, and ruleIds names every rule it created, changed or deleted.
 */
export interface RuleChange {
  op: 'create' | 'update' | 'delete' | 'enable' | 'disable' | 'restore' | 'reload' | string;
  rule: Rule | null;
  ruleId: string;
  ruleIds?: string[] | null;
}

export interface SessionControlChange {
  sessionId: string;
  control: 'pause' | 'resume' | 'block';
  operator?: string;
  note?: string;
}

/** One frame of the live websocket. */
export type LiveEvent =
  | { seq: number; type: 'step'; sessionId?: string; at: string; payload: Step }
  | { seq: number; type: 'hold.created' | 'hold.resolved'; sessionId?: string; at: string; payload: Hold }
  | { seq: number; type: 'rule.changed'; sessionId?: string; at: string; payload: RuleChange }
  | { seq: number; type: 'session.control'; sessionId?: string; at: string; payload: SessionControlChange }
  | { seq: number; type: 'audit'; sessionId?: string; at: string; payload: AuditEntry }
  | { seq: number; type: 'stats'; sessionId?: string; at: string; payload: Stats };

export type LiveEventType = LiveEvent['type'];
