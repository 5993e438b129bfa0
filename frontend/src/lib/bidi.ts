// Text from agents (tool and input names, values, ids, snippets) may carry Unicode bidi
// controls. An unclosed RLO (U+202E) in `note=ok‮` would draw everything after it on the same
// line right to left ("note=ok1-TCCA=ot 0009=tnuoma"), so what a reviewer reads is not what
// the agent sent. Every piece of such text is therefore closed off: its controls balanced (so
// whatever it opens ends with it), and, where it stands alone, inside an isolating <bdi>.
// Balancing leaves text without controls as it is, so what is shown still reads (and copies)
// exactly as sent.

const EMBED = new Set(['\u202a', '\u202b', '\u202d', '\u202e']); // LRE RLE LRO RLO
const ISOLATE = new Set(['\u2066', '\u2067', '\u2068']); // LRI RLI FSI
const PDF = '\u202c';
const PDI = '\u2069';
const ANY = /[\u202a-\u202e\u2066-\u2069]/;

/**
 * The text with its bidi controls balanced: every embedding, override and isolate it opens is
 * closed at its end, and a PDF or PDI that closes nothing it opened is dropped (a stray PDI
 * would otherwise close the isolate around the text and let what follows it leak out). Text
 * without such controls comes back unchanged.
 */
export function bidiBalanced(s: string): string {
  if (!ANY.test(s)) return s;
  const open: ('e' | 'i')[] = [];
  let out = '';
  for (const ch of s) {
    if (EMBED.has(ch)) open.push('e');
    else if (ISOLATE.has(ch)) open.push('i');
    else if (ch === PDF) {
      // Within an isolate a PDF closes only embeddings opened inside it.
      if (open[open.length - 1] !== 'e') continue;
      open.pop();
    } else if (ch === PDI) {
      const at = open.lastIndexOf('i');
      if (at < 0) continue;
      // A PDI closes its isolate and every embedding opened inside it.
      open.length = at;
    }
    out += ch;
  }
  for (let i = open.length - 1; i >= 0; i--) out += open[i] === 'i' ? PDI : PDF;
  return out;
}

/** Whether the text holds a bidi control that could reorder what follows it. */
export function hasBidiControls(s: string): boolean {
  return ANY.test(s);
}

/**
 * Text the guardian joined from several pieces (a search snippet: a step's messages and
 * `name=value` inputs in one string), where the pieces cannot be told apart: each word is
 * balanced by itself, so a control reaches no further than the word it is in.
 */
export function bidiBalancedWords(s: string): string {
  if (!ANY.test(s)) return s;
  return s
    .split(/(\s+)/)
    .map((w, i) => (i % 2 ? w : bidiBalanced(w)))
    .join('');
}

const ANY_GLOBAL = /[\u202a-\u202e\u2066-\u2069]/g;

/**
 * A string as JSON text, with its bidi controls written as JSON escapes (`\u202e`), as
 * JSON allows: a raw JSON view shows what the agent sent, control characters included, and
 * an escaped control reorders nothing around it.
 */
export function jsonStringShown(s: string): string {
  return JSON.stringify(s).replace(ANY_GLOBAL, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}
