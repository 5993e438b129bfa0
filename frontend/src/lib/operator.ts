// The operator's name, remembered in localStorage so it is asked once per browser.

export interface KV {
  getItem(k: string): string | null;
  setItem(k: string, v: string): void;
}

const KEY = 'vigil.operator';

export function loadOperator(store: KV | undefined): string {
  try {
    return store?.getItem(KEY)?.trim() ?? '';
  } catch {
    return '';
  }
}

export function saveOperator(store: KV | undefined, name: string): string {
  const n = name.trim().slice(0, 80);
  try {
    if (n) store?.setItem(KEY, n);
  } catch {
    /* private mode: keep it for this page only */
  }
  return n;
}
