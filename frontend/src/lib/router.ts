// Hash routes: the console needs no server routes, and the desktop window can load it as files.

export type Route =
  | { page: 'live' }
  | { page: 'session'; id: string; step?: number }
  | { page: 'held'; hold?: string }
  | { page: 'rules'; id?: string; isNew?: boolean }
  | { page: 'overview' }
  | { page: 'audit'; sessionId?: string; type?: string; operator?: string }
  | { page: 'compare'; a?: string; b?: string }
  | { page: 'access' }
  | { page: 'search'; query: SearchParams };

/** The search page's query and filters, as they appear in its URL. */
export interface SearchParams {
  q?: string;
  session?: string;
  agent?: string;
  user?: string;
  tool?: string;
  decision?: string;
  rule?: string;
  from?: string;
  to?: string;
}

export const SEARCH_KEYS = ['q', 'session', 'agent', 'user', 'tool', 'decision', 'rule', 'from', 'to'] as const;

/**
 * A path segment as typed: percent-decoded, or as it is when it does not decode (a hand-typed
 * `#/session/50%off` names the session "50%off" instead of throwing "URI malformed").
 */
export function decodeSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

export function parseHash(hash: string): Route {
  const h = hash.replace(/^#\/?/, '');
  const [pathPart = '', queryPart = ''] = h.split('?', 2);
  const parts = pathPart.split('/').filter(Boolean).map(decodeSegment);
  const q = new URLSearchParams(queryPart);
  switch (parts[0]) {
    case undefined:
    case '':
    case 'live':
      return { page: 'live' };
    case 'session':
    case 'sessions': {
      if (!parts[1]) return { page: 'live' };
      const step = Number(q.get('step'));
      return step > 0 ? { page: 'session', id: parts[1], step } : { page: 'session', id: parts[1] };
    }
    case 'held': {
      const hold = q.get('hold');
      return hold ? { page: 'held', hold } : { page: 'held' };
    }
    case 'rules':
      if (parts[1] === 'new') return { page: 'rules', isNew: true };
      return parts[1] ? { page: 'rules', id: parts[1] } : { page: 'rules' };
    case 'overview':
      return { page: 'overview' };
    case 'access':
      return { page: 'access' };
    case 'audit': {
      const r: Route = { page: 'audit' };
      if (q.get('session')) r.sessionId = q.get('session')!;
      if (q.get('type')) r.type = q.get('type')!;
      if (q.get('operator')) r.operator = q.get('operator')!;
      return r;
    }
    case 'search': {
      const query: SearchParams = {};
      for (const k of SEARCH_KEYS) {
        const v = q.get(k);
        if (v) query[k] = v;
      }
      return { page: 'search', query };
    }
    case 'compare': {
      const r: Route = { page: 'compare' };
      if (q.get('a')) r.a = q.get('a')!;
      if (q.get('b')) r.b = q.get('b')!;
      return r;
    }
    default:
      return { page: 'live' };
  }
}

export function href(r: Route): string {
  const e = encodeURIComponent;
  switch (r.page) {
    case 'live':
      return '#/live';
    case 'session':
      return `#/session/${e(r.id)}${r.step ? `?step=${r.step}` : ''}`;
    case 'held':
      return r.hold ? `#/held?hold=${e(r.hold)}` : '#/held';
    case 'rules':
      return r.isNew ? '#/rules/new' : r.id ? `#/rules/${e(r.id)}` : '#/rules';
    case 'overview':
      return '#/overview';
    case 'access':
      return '#/access';
    case 'audit': {
      const q = new URLSearchParams();
      if (r.sessionId) q.set('session', r.sessionId);
      if (r.type) q.set('type', r.type);
      if (r.operator) q.set('operator', r.operator);
      const qs = q.toString();
      return qs ? `#/audit?${qs}` : '#/audit';
    }
    case 'search': {
      const q = new URLSearchParams();
      for (const k of SEARCH_KEYS) {
        const v = r.query[k];
        if (v) q.set(k, v);
      }
      const qs = q.toString();
      return qs ? `#/search?${qs}` : '#/search';
    }
    case 'compare': {
      const q = new URLSearchParams();
      if (r.a) q.set('a', r.a);
      if (r.b) q.set('b', r.b);
      const qs = q.toString();
      return qs ? `#/compare?${qs}` : '#/compare';
    }
  }
}
