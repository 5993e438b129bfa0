// Pages loaded on first visit (the rule editor, the charts): a failed load must not be kept,
// or the page stays broken until a full reload after the guardian was unreachable once.

/**
 * Wraps a loader (a dynamic import) so that a success is kept and reused, and a failure is
 * forgotten: the next call loads again. beforeRetry runs before every load that follows a
 * failure (e.g. to put back the stylesheets that failed with it).
 */
export function retryable<T>(load: () => Promise<T>, beforeRetry?: () => Promise<void>): () => Promise<T> {
  let kept: Promise<T> | null = null;
  let failed = false;
  return () => {
    if (kept) return kept;
    const p = (failed && beforeRetry ? beforeRetry().then(load) : load()).catch((err: unknown) => {
      if (kept === p) kept = null;
      failed = true;
      throw err;
    });
    kept = p;
    return p;
  };
}

// Stylesheet links that failed to load. A failed <link> keeps an empty sheet in Chromium, so
// only its error event tells; errors do not bubble, but they can be caught on the way down.
const failedLinks = new WeakSet<EventTarget>();
if (typeof document !== 'undefined') {
  document.addEventListener(
    'error',
    (e) => {
      if (e.target instanceof HTMLLinkElement) failedLinks.add(e.target);
    },
    true,
  );
}

/**
 * Loads again the stylesheets of the page that failed to load. Vite's preload helper never
 * asks twice for a stylesheet it already added, so a chunk imported again after its CSS
 * failed would render unstyled. Rejects when one fails again.
 */
export function reloadFailedStylesheets(doc: Document = document): Promise<void> {
  const failed = [...doc.querySelectorAll<HTMLLinkElement>('link[rel="stylesheet"]')].filter((l) => failedLinks.has(l) || !l.sheet);
  return Promise.all(
    failed.map(
      (old) =>
        new Promise<void>((ok, bad) => {
          const link = old.cloneNode() as HTMLLinkElement;
          link.addEventListener('load', () => ok());
          link.addEventListener('error', () => bad(new Error(`Unable to load the stylesheet ${old.href}`)));
          old.replaceWith(link);
        }),
    ),
  ).then(() => undefined);
}
