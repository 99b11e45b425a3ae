/**
 * A --profile run's section: where each rank's step time went (input, compute, communication, other), the
 * slowest rank and why, and where each rank's trace is (TensorBoard's profiler and Perfetto open it). The same
 * table as the HTML and text reports (`views/profile.py`).
 */
import { details, el, isObject } from './dom';
import { num, str } from './format';
import { IViewState, P } from './model';
import { IProfile, IProfileRank, IRunSnapshot } from './types';

const KINDS: [keyof IProfileRank, string][] = [
  ['input', 'Input'],
  ['compute', 'Compute'],
  ['comm', 'Comm'],
  ['other', 'Other']
];

function pct(value: unknown): string {
  const n = num(value);
  return n === null ? '\u2014' : `${Math.round(n * 100)}%`;
}

function row(r: IProfileRank): HTMLTableRowElement {
  const tr = el('tr');
  const first = num(r.first);
  const last = num(r.last);
  const stepS = num(r.step_s);
  tr.appendChild(el('td', undefined, String(num(r.rank) ?? '')));
  tr.appendChild(el('td', undefined, first === null || last === null ? '\u2014' : `${first}\u2013${last}`));
  tr.appendChild(el('td', undefined, stepS === null ? '\u2014' : `${(stepS * 1000).toFixed(1)} ms`));
  for (const [key] of KINDS) {
    tr.appendChild(el('td', undefined, pct(r[key])));
  }
  tr.appendChild(el('td', `${P}-muted`, str(r.note) || str(r.trace)));
  return tr;
}

/** The section, or null for a run that was not profiled. */
export function profileSection(snap: IRunSnapshot, state: IViewState): HTMLElement | null {
  const profile = isObject(snap.profile) ? (snap.profile as IProfile) : null;
  const ranks = profile && Array.isArray(profile.ranks) ? profile.ranks.filter(isObject) : [];
  if (!profile || ranks.length === 0) {
    return null;
  }
  const verdict = str(profile.verdict);
  const node = details('profile', `Profile${verdict ? `: ${verdict}` : ''}`, true, state, `${P}-profile`);
  const table = el('table', `${P}-table`);
  const head = el('tr');
  for (const title of ['Rank', 'Steps', 'Step', ...KINDS.map(k => k[1]), 'Trace']) {
    head.appendChild(el('th', undefined, title));
  }
  table.appendChild(el('thead')).appendChild(head);
  const body = el('tbody');
  for (const r of ranks as IProfileRank[]) {
    body.appendChild(row(r));
  }
  table.appendChild(body);
  node.appendChild(table);
  return node;
}
