// CodeMirror 6 set up for expr conditions: highlighting from the expr tokenizer, completions
// for fields, members, helpers and built-ins, and diagnostics that the page pushes in from the
// server's compiler. Loaded only with the Rules page.

import { autocompletion, closeBrackets, closeBracketsKeymap, completionKeymap, type Completion, type CompletionContext } from '@codemirror/autocomplete';
import { defaultKeymap, history, historyKeymap, indentWithTab } from '@codemirror/commands';
import { bracketMatching } from '@codemirror/language';
import { lintGutter, setDiagnostics, type Diagnostic } from '@codemirror/lint';
import { EditorState, RangeSetBuilder, type Extension } from '@codemirror/state';
import {
  Decoration,
  EditorView,
  ViewPlugin,
  drawSelection,
  highlightActiveLine,
  highlightActiveLineGutter,
  keymap,
  lineNumbers,
  placeholder as placeholderExt,
  type DecorationSet,
  type ViewUpdate,
} from '@codemirror/view';
import { BUILTINS, FIELDS, HELPERS, KEYWORDS, tokenize } from './expr';
import type { Diag } from './ruleform';

const marks: Record<string, Decoration> = {};
for (const t of ['keyword', 'operator', 'string', 'number', 'helper', 'builtin', 'field', 'comment', 'invalid', 'punct']) {
  marks[t] = Decoration.mark({ class: `tok-${t}` });
}

function highlight(view: EditorView): DecorationSet {
  const b = new RangeSetBuilder<Decoration>();
  for (const t of tokenize(view.state.doc.toString())) {
    const m = marks[t.type];
    if (m && t.to > t.from) b.add(t.from, t.to, m);
  }
  return b.finish();
}

const exprHighlight = ViewPlugin.fromClass(
  class {
    decorations: DecorationSet;
    constructor(view: EditorView) {
      this.decorations = highlight(view);
    }
    update(u: ViewUpdate) {
      if (u.docChanged) this.decorations = highlight(u.view);
    }
  },
  { decorations: (v) => v.decorations },
);

/** Members of the environment's structured fields. */
const MEMBERS: Record<string, Record<string, string>> = {
  agent: { id: 'agent id', name: 'agent name', version: 'agent version', provider: 'provider name', model: 'model id' },
  user: { id: 'user id', name: 'user name', email: 'user e-mail', org: 'organization id' },
  session: { id: 'session id', stepCount: 'steps so far', steps: 'earlier steps: method, kind, tool, decision, text, seq, receivedAt' },
  mcp: { method: 'MCP method', tool: 'MCP tool name', arguments: 'MCP tool arguments' },
  a2a: { method: 'A2A method', text: 'message text', from: 'sender', to: 'recipient', contextId: 'A2A context id' },
};

function complete(ctx: CompletionContext) {
  const word = ctx.matchBefore(/[A-Za-z_$][\w$]*/);
  const before = ctx.state.doc.sliceString(Math.max(0, (word?.from ?? ctx.pos) - 2), word?.from ?? ctx.pos);
  if (!word && !ctx.explicit && !before.endsWith('.')) return null;
  const from = word?.from ?? ctx.pos;
  const member = /([A-Za-z_$][\w$]*)\??\.$/.exec(ctx.state.doc.sliceString(Math.max(0, from - 40), from));
  if (member) {
    const m = MEMBERS[member[1]!];
    if (!m) return null;
    return { from, options: Object.entries(m).map(([label, detail]): Completion => ({ label, detail, type: 'property' })) };
  }
  const options: Completion[] = [
    ...Object.entries(FIELDS).map(([label, info]): Completion => ({ label, info, type: 'variable', boost: 2 })),
    ...Object.entries(HELPERS).map(([label, info]): Completion => ({ label, info, type: 'function', apply: `${label}(`, boost: 1 })),
    ...[...BUILTINS].map((label): Completion => ({ label, type: 'function', apply: `${label}(` })),
    ...[...KEYWORDS].map((label): Completion => ({ label, type: 'keyword' })),
  ];
  return { from, options, validFor: /^[\w$]*$/ };
}

const theme = EditorView.theme({
  '&': {
    fontSize: '13px',
    backgroundColor: 'var(--panel)',
    color: 'var(--text)',
    border: '1px solid var(--border-strong)',
    borderRadius: '6px',
  },
  '&.cm-focused': {
    outline: 'none',
    borderColor: 'var(--focus)',
    boxShadow: '0 0 0 3px color-mix(in srgb, var(--focus) 25%, transparent)',
  },
  '.cm-scroller': { fontFamily: 'var(--mono)', lineHeight: '1.6', minHeight: '120px' },
  '.cm-content': { padding: '8px 0', caretColor: 'var(--text)' },
  '.cm-gutters': { backgroundColor: 'var(--panel-2)', color: 'var(--faint)', borderRight: '1px solid var(--border)', borderRadius: '6px 0 0 6px' },
  '.cm-activeLine': { backgroundColor: 'color-mix(in srgb, var(--accent) 6%, transparent)' },
  '.cm-activeLineGutter': { backgroundColor: 'color-mix(in srgb, var(--accent) 10%, transparent)', color: 'var(--text-2)' },
  '.cm-selectionBackground, &.cm-focused .cm-selectionBackground, ::selection': {
    backgroundColor: 'color-mix(in srgb, var(--accent) 28%, transparent) !important',
  },
  '.cm-cursor': { borderLeftColor: 'var(--text)' },
  '.cm-matchingBracket': { backgroundColor: 'color-mix(in srgb, var(--allow) 25%, transparent)', outline: 'none' },
  '.cm-placeholder': { color: 'var(--faint)' },
  '.tok-keyword': { color: 'var(--hold)', fontWeight: '600' },
  '.tok-operator': { color: 'var(--deny)' },
  '.tok-string': { color: 'var(--allow)' },
  '.tok-number': { color: 'var(--info)' },
  '.tok-helper': { color: 'var(--modify)', fontWeight: '600' },
  '.tok-builtin': { color: 'var(--modify)' },
  '.tok-field': { color: 'var(--accent)' },
  '.tok-comment': { color: 'var(--faint)', fontStyle: 'italic' },
  '.tok-invalid': { color: 'var(--deny)', textDecoration: 'underline wavy' },
  '.tok-punct': { color: 'var(--muted)' },
  '.cm-lintRange-error': {
    backgroundImage: 'none',
    textDecoration: 'underline wavy var(--deny)',
    textUnderlineOffset: '3px',
    backgroundColor: 'color-mix(in srgb, var(--deny) 12%, transparent)',
  },
  '.cm-lintPoint-error:after': { borderBottomColor: 'var(--deny)' },
  '.cm-tooltip': { backgroundColor: 'var(--panel)', border: '1px solid var(--border-strong)', borderRadius: '6px', boxShadow: 'var(--shadow-lg)' },
  '.cm-tooltip-autocomplete > ul > li[aria-selected]': { backgroundColor: 'var(--accent-soft)', color: 'var(--text)' },
  '.cm-completionDetail': { color: 'var(--muted)', fontStyle: 'normal', marginLeft: '8px' },
  '.cm-diagnostic-error': { borderLeftColor: 'var(--deny)' },
});

export interface ExprEditor {
  view: EditorView;
  setDoc(text: string): void;
  showDiagnostics(diags: Diag[]): void;
  destroy(): void;
}

export function createExprEditor(
  parent: HTMLElement,
  opts: { doc: string; onChange: (text: string) => void; label: string; placeholder?: string; readOnly?: boolean; describedBy?: string },
): ExprEditor {
  const extensions: Extension[] = [
    lineNumbers(),
    highlightActiveLineGutter(),
    history(),
    drawSelection(),
    highlightActiveLine(),
    bracketMatching(),
    closeBrackets(),
    autocompletion({ override: [complete], icons: false }),
    lintGutter(),
    exprHighlight,
    keymap.of([...closeBracketsKeymap, ...defaultKeymap, ...historyKeymap, ...completionKeymap, indentWithTab]),
    EditorView.lineWrapping,
    EditorView.contentAttributes.of({
      'aria-label': opts.label,
      'aria-multiline': 'true',
      // Tab indents here: the hint that says how to leave (Esc, then Tab) is read with the field.
      ...(opts.describedBy ? { 'aria-describedby': opts.describedBy } : {}),
    }),
    EditorView.updateListener.of((u) => {
      if (u.docChanged) opts.onChange(u.state.doc.toString());
    }),
    theme,
  ];
  if (opts.placeholder) extensions.push(placeholderExt(opts.placeholder));
  if (opts.readOnly) extensions.push(EditorState.readOnly.of(true), EditorView.editable.of(false));
  const view = new EditorView({ parent, state: EditorState.create({ doc: opts.doc, extensions }) });
  return {
    view,
    setDoc(text: string) {
      if (text === view.state.doc.toString()) return;
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    },
    showDiagnostics(diags: Diag[]) {
      const len = view.state.doc.length;
      const d: Diagnostic[] = diags.map((x) => ({
        from: Math.min(x.from, len),
        to: Math.min(Math.max(x.to, x.from), len),
        severity: 'error',
        message: `${x.line}:${x.column} ${x.message}`,
        source: 'compiler',
      }));
      view.dispatch(setDiagnostics(view.state, d));
    },
    destroy() {
      view.destroy();
    },
  };
}
