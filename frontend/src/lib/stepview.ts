// Turns a stored AOS request into something an operator can read at a glance: a title, the
// text, the tool and its inputs, the reasoning. Accepts the spec's variants (see ERRATA).

export interface Section {
  label: string;
  text: string;
}

export interface Readable {
  title: string;
  subtitle?: string;
  role?: string;
  tool?: string;
  inputs?: { name: string; value: unknown }[];
  sections: Section[];
  reasoning?: string;
  isError?: boolean;
  agent?: string;
  user?: string;
  turnId?: string;
  stepId?: string;
}

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : {});
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string | undefined => (typeof v === 'string' && v !== '' ? v : undefined);

/** Text of AOS parts: text as is, files by name or URI, data as JSON. */
export function partsText(parts: unknown): string {
  return arr(parts)
    .map((p) => {
      const o = obj(p);
      if (o.kind === 'text' || typeof o.text === 'string') return String(o.text ?? '');
      if (o.kind === 'file') {
        const f = obj(o.file);
        return `[file ${str(f.name) ?? str(f.uri) ?? ''}${str(f.mimeType) ? ` (${f.mimeType})` : ''}]`;
      }
      if (o.kind === 'data') return JSON.stringify(o.data, null, 2);
      return '';
    })
    .filter((s) => s !== '')
    .join('\n');
}

export const KIND_LABEL: Record<string, string> = {
  trigger: 'Trigger',
  message: 'Message',
  knowledge: 'Knowledge',
  memoryStore: 'Memory store',
  memoryRetrieval: 'Memory retrieval',
  toolCall: 'Tool call',
  toolResult: 'Tool result',
  mcp: 'MCP',
  a2a: 'A2A',
  ping: 'Ping',
};

export function kindOf(method: string): string {
  switch (method) {
    case 'steps/agentTrigger':
      return 'trigger';
    case 'steps/message':
      return 'message';
    case 'steps/knowledgeRetrieval':
      return 'knowledge';
    case 'steps/memoryStore':
      return 'memoryStore';
    case 'steps/memoryContextRetrieval':
      return 'memoryRetrieval';
    case 'steps/toolCallRequest':
      return 'toolCall';
    case 'steps/toolCallResult':
      return 'toolResult';
    case 'protocols/MCP':
      return 'mcp';
    case 'ping':
      return 'ping';
    default:
      return method === 'protocols/A2A' || method.startsWith('message/') || method.startsWith('tasks/') ? 'a2a' : 'unknown';
  }
}

/** Accepts either a whole JSON-RPC request or a bare {method, params}. */
export function readable(request: unknown, fallbackMethod = ''): Readable {
  const req = obj(request);
  const method = str(req.method) ?? fallbackMethod;
  const p = obj(req.params);
  const ctx = obj(p.context);
  const agent = obj(ctx.agent);
  const user = obj(ctx.user);
  const kind = kindOf(method);
  const r: Readable = {
    title: KIND_LABEL[kind] ?? method,
    sections: [],
    agent: str(agent.name) ?? str(agent.id),
    user: str(user.name) ?? str(user.email) ?? str(user.id),
    turnId: str(ctx.turnId),
    stepId: str(ctx.stepId),
    reasoning: str(p.reasoning),
  };
  switch (kind) {
    case 'trigger': {
      const t = obj(p.trigger);
      const ev = obj(t.event);
      r.subtitle = [str(t.type), str(ev.type)].filter(Boolean).join(' · ') || undefined;
      const text = partsText(t.content);
      if (text) r.sections.push({ label: 'Trigger', text });
      break;
    }
    case 'message': {
      const m = obj(p.message);
      r.role = str(m.role);
      r.title = r.role ? `Message from ${r.role}` : 'Message';
      const text = partsText(m.content);
      if (text) r.sections.push({ label: 'Text', text });
      const cites = arr(p.citations ?? p.citation)
        .map((c) => {
          const o = obj(c);
          return str(o.url) ?? str(o.name) ?? str(o.id) ?? '';
        })
        .filter(Boolean);
      if (cites.length) r.sections.push({ label: 'Citations', text: cites.join('\n') });
      break;
    }
    case 'knowledge': {
      const k = obj(p.knowledgeStep);
      if (str(k.query)) r.sections.push({ label: 'Query', text: String(k.query) });
      const kw = arr(k.keywords).map(String);
      if (kw.length) r.sections.push({ label: 'Keywords', text: kw.join(', ') });
      arr(k.results).forEach((res, i) => {
        const o = obj(res);
        r.sections.push({ label: `Result ${i + 1}${str(o.id) ? ` · ${o.id}` : ''}`, text: String(o.content ?? '') });
      });
      break;
    }
    case 'memoryStore':
    case 'memoryRetrieval': {
      arr(p.memory).forEach((m, i) => r.sections.push({ label: `Memory ${i + 1}`, text: String(m) }));
      break;
    }
    case 'toolCall': {
      const t = obj(p.toolCallRequest);
      r.tool = str(t.toolId);
      r.title = r.tool ? `Tool call · ${r.tool}` : 'Tool call';
      r.subtitle = str(t.executionId) ? `execution ${t.executionId}` : undefined;
      r.inputs = arr(t.inputs).map((i) => {
        const o = obj(i);
        return { name: str(o.name) ?? str(o.id) ?? '?', value: o.value };
      });
      break;
    }
    case 'toolResult': {
      const nested = obj(p.toolCallResult);
      const exec = str(p.executionId) ?? str(nested.executionId);
      const result = obj(p.result ?? nested.result);
      r.subtitle = exec ? `execution ${exec}` : undefined;
      r.isError = result.isError === true;
      const text = partsText(result.outputs);
      if (text) r.sections.push({ label: r.isError ? 'Error output' : 'Output', text });
      break;
    }
    case 'mcp': {
      const msg = p.jsonrpc === '2.0' ? p : obj(p.message);
      const mp = obj(msg.params);
      const mm = str(msg.method);
      r.subtitle = mm;
      if (mm === 'tools/call') {
        r.tool = str(mp.name);
        r.title = r.tool ? `MCP tool · ${r.tool}` : 'MCP tool call';
        r.inputs = Object.entries(obj(mp.arguments)).map(([name, value]) => ({ name, value }));
      } else if (msg.result !== undefined) {
        const content = obj(msg.result).content;
        const text = partsText(content);
        if (text) r.sections.push({ label: 'Result', text });
      }
      break;
    }
    case 'a2a': {
      const inner = obj(p.payload ?? p.message);
      const m = inner.parts ? inner : obj(obj(inner.params).message ?? inner.message);
      r.subtitle = method === 'protocols/A2A' ? undefined : method;
      r.role = str(m.role);
      const text = partsText(m.parts);
      if (text) r.sections.push({ label: 'Message', text });
      break;
    }
  }
  return r;
}

/** The params of a JSON-RPC request (what edit-and-approve edits). */
export function paramsOf(request: unknown): unknown {
  return obj(request).params ?? {};
}

/** Formats an input value for display: strings raw, everything else as compact JSON. */
export function valueText(v: unknown): string {
  if (typeof v === 'string') return v;
  return JSON.stringify(v, null, 2) ?? 'null';
}
