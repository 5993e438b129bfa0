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
}

export type HoldStatus = 'pending' | 'approved' | 'denied' | 'modified' | 'timedOut' | 'abandoned';

export interface Hold {
  id: string;
  seq: number;
  sessionId: string;
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
  decidedBy?: string;
  decidedAt?: string;
  /** The answer the agent got (allow, deny, modify); empty while pending. */
  decision?: string;
  note?: string;
}

export interface RuleStats {
  evaluations: number;
  matches: number;
  errors: number;
  avgMicros: number;
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
  message?: string;
  reasonCode?: string[] | null;
  matches?: RuleMatch[] | null;
  modifiedRequest?: unknown;
}

export interface BacktestExample {
  seq: number;
  method: string;
  sessionId: string;
  before: Decision;
  after: Decision;
  rules?: string[] | null;
}

export interface BacktestResult {
  evaluated: number;
  changed: number;
  byChange: Record<string, number> | null;
  examples: BacktestExample[] | null;
}

export interface MinuteStats {
  minute: string;
  allow: number;
  deny: number;
  modify: number;
  hold: number;
}

export interface Stats {
  steps: number;
  sessions: number;
  perMinute: MinuteStats[] | null;
  topRules: { ruleId: string; matches: number }[] | null;
  topTools: { tool: string; count: number }[] | null;
  latency: { p50Micros: number; p99Micros: number };
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

export interface Info {
  version: string;
  aosEndpoint: string;
  db?: string;
  rulesFile?: string;
}

export interface RuleChange {
  op: 'create' | 'update' | 'delete' | 'enable' | 'disable' | 'restore' | 'reload' | string;
  rule: Rule | null;
  ruleId: string;
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
