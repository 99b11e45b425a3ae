/**
 * DOM helpers of the renderer. All text goes through `textContent` or `setAttribute`: nothing from
 * a snapshot is ever parsed as HTML, so the renderer is safe for untrusted notebooks.
 */
import { num } from './format';
import { IViewState, P } from './model';
import { IRankSnapshot } from './types';

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function token(value: string): string {
  return value.replace(/[^a-z_]/g, '');
}

export function rankId(r: IRankSnapshot, index: number): number {
  const n = num(r.rank);
  return n === null ? index : n;
}

export function details(
  key: string,
  summary: HTMLElement | string,
  openByDefault: boolean,
  state: IViewState,
  cls: string
): HTMLDetailsElement {
  const node = el('details', cls);
  node.dataset.k = key;
  node.dataset.default = openByDefault ? 'open' : 'closed';
  const remembered = state.details[key];
  node.open = remembered === undefined ? openByDefault : remembered;
  const head = el('summary', `${P}-summary`);
  if (typeof summary === 'string') {
    head.textContent = summary;
  } else {
    head.appendChild(summary);
  }
  node.appendChild(head);
  return node;
}
