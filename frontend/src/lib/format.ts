// Small formatting helpers shared by the pages.

/** "3 s ago", "5 min ago", "2 h ago", then a date. */
export function relTime(iso: string | undefined, now: number): string {
  if (!iso) return '—';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '—';
  const s = Math.round((now - t) / 1000);
  if (s < 5) return 'just now';
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)} h ago`;
  return dayFmt.format(t);
}

// Formatters are costly to create; the ticker formats hundreds of times a second.
const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
const dateTimeFmt = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium', hour12: false });
const dayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });
const intFmt = new Intl.NumberFormat('en-US');

/** Local wall clock with seconds, e.g. 14:03:07. */
export function clock(iso: string | undefined): string {
  if (!iso) return '';
  const t = Date.parse(iso);
  return Number.isNaN(t) ? '' : timeFmt.format(t);
}

export function dateTime(iso: string | undefined): string {
  if (!iso) return '';
  const t = Date.parse(iso);
  return Number.isNaN(t) ? '' : dateTimeFmt.format(t);
}

/** Microseconds as "850 µs", "12.3 ms", "1.20 s". */
export function micros(us: number | undefined | null): string {
  if (us === undefined || us === null || !Number.isFinite(us)) return '—';
  if (us < 1000) return `${Math.round(us)} µs`;
  if (us < 1_000_000) return `${(us / 1000).toFixed(us < 10_000 ? 1 : 0)} ms`;
  return `${(us / 1_000_000).toFixed(2)} s`;
}

/** 1234 → "1,234"; 1_234_567 → "1.2M". */
export function count(n: number | undefined | null): string {
  if (n === undefined || n === null) return '0';
  if (n >= 10_000_000) return `${(n / 1_000_000).toFixed(0)}M`;
  if (n >= 1_000_000) return `${(n / 1_000_000).toFixed(1)}M`;
  return intFmt.format(n);
}

/** "1 step", "2 steps", "1,234 steps": the count and the word, singular for exactly one. */
export function plural(n: number | undefined | null, one: string, many = `${one}s`): string {
  return `${count(n)} ${n === 1 ? one : many}`;
}

/** "steps/toolCallRequest" → "toolCallRequest". */
export function shortMethod(m: string | undefined): string {
  if (!m) return '';
  const i = m.lastIndexOf('/');
  return i >= 0 ? m.slice(i + 1) : m;
}

/** Shortens long ids in the middle: "sess-1234…cdef". */
export function shortId(id: string, max = 18): string {
  if (id.length <= max) return id;
  const half = Math.floor((max - 1) / 2);
  return id.slice(0, half) + '…' + id.slice(-half);
}
