/**
 * A many-rank run's ranks: every rank in a few columns (the snapshot's `table`), a page at a time, searched
 * and sorted in the browser; and the details of the rank the user opened (its full row, when the snapshot
 * has it: failed ranks, outliers and the rank the live view asked the kernel for).
 *
 * Only the page's rows go into the DOM, whatever the number of ranks; filtering and sorting the rows is
 * plain JavaScript over arrays, a fraction of a millisecond at 1,024 ranks.
 */
import { chartSection } from './failure';
import { el, isObject, rankId, token } from './dom';
import { clip, count, DASH, metric, num, rate, str } from './format';
import { logBody } from './logs';
import { ILiveOptions, IViewState, P } from './model';
import { rankPlace } from './stacks';
import { progressCell } from './table';
import { IPlace, IRankSnapshot, IRunError, ITable } from './types';

/**
 * The event the live view dispatches when the user opens a rank (detail: `{ranks, run}`); bubbles and crosses
 * shadow roots. A foreground run's kernel reads no widget message until its cell ends, so besides setting the
 * widget's `focus` the plugin (`plugin.ts`) passes it on over the kernel's control channel, as Stacks does.
 */
export const FOCUS_EVENT = 'jupyter-torchdist:focus';

/** Ask for the full rows of `ranks` (none: no rank) from `origin`; true when a handler took it. */
export function requestFocus(origin: HTMLElement, ranks: number[], run: number | null = null): boolean {
  const event = new CustomEvent(FOCUS_EVENT, {
    bubbles: true,
    composed: true,
    cancelable: true,
    detail: { source: 'jupyter-torchdist', run, ranks }
  });
  return !origin.dispatchEvent(event);
}

/** Rows on a page. */
export const PAGE_ROWS = 50;

/** Columns the table sorts by. */
export const SORTABLE = ['step', 'rate', 'loss'];

/** One rank of the table. */
export interface ITableRow {
  rank: number;
  host: string;
  state: string;
  step: number | null;
  rate: number | null;
  loss: number | null;
}

/** The table's rows, defensively: a row that is not a list, or has no rank, is skipped. */
export function tableRows(table: ITable | null): ITableRow[] {
  if (!table || !Array.isArray(table.rows)) {
    return [];
  }
  const hosts = Array.isArray(table.hosts) ? table.hosts : [];
  const states = Array.isArray(table.states) ? table.states : [];
  const out: ITableRow[] = [];
  for (const row of table.rows) {
    if (!Array.isArray(row)) {
      continue;
    }
    const rank = num(row[0]);
    if (rank === null) {
      continue;
    }
    const h = num(row[1]);
    const s = num(row[2]);
    out.push({
      rank,
      host: h === null ? '' : str(hosts[h]),
      state: (s === null ? '' : str(states[s])) || 'pending',
      step: num(row[3]),
      rate: num(row[4]),
      loss: num(row[5])
    });
  }
  return out;
}

/**
 * The rows the search keeps: a number is a rank ("17"), anything else a state ("failed") or part of a
 * host name ("sim-003"); several words keep the rows any of them keeps.
 */
export function filterRows(rows: ITableRow[], search: string): ITableRow[] {
  const terms = search
    .toLowerCase()
    .split(/[\s,]+/)
    .filter(Boolean);
  if (!terms.length) {
    return rows;
  }
  const ranks = new Set<number>();
  const words: string[] = [];
  for (const t of terms) {
    if (/^\d+$/.test(t)) {
      ranks.add(Number(t));
    } else {
      words.push(t);
    }
  }
  return rows.filter(
    r =>
      ranks.has(r.rank) ||
      words.some(w => r.state.toLowerCase() === w || r.host.toLowerCase().includes(w))
  );
}

/** Sorted by a column (ranks without a value last, either way), ties by rank; by rank without one. */
export function sortRows(rows: ITableRow[], key: string | null, desc: boolean): ITableRow[] {
  if (!key || !SORTABLE.includes(key)) {
    return rows;
  }
  const k = key as 'step' | 'rate' | 'loss';
  const sign = desc ? -1 : 1;
  return rows.slice().sort((a, b) => {
    const x = a[k];
    const y = b[k];
    if (x === null || y === null) {
      return x === y ? a.rank - b.rank : x === null ? 1 : -1;
    }
    return (x - y) * sign || a.rank - b.rank;
  });
}

function searchBox(state: IViewState): HTMLElement {
  const input = el('input', `${P}-search`);
  input.type = 'search';
  input.placeholder = 'rank, host or state';
  input.setAttribute('aria-label', 'Find ranks by rank number, host or state');
  input.setAttribute('spellcheck', 'false');
  input.setAttribute('value', state.search);
  input.value = state.search;
  return input;
}

function pageButton(text: string, page: number, disabled: boolean, action: string): HTMLButtonElement {
  const button = el('button', `${P}-pageButton`, text);
  button.type = 'button';
  button.dataset.action = action;
  button.dataset.page = String(page);
  button.disabled = disabled;
  return button;
}

function pager(shown: number, all: number, page: number, pages: number, state: IViewState): HTMLElement {
  const bar = el('div', `${P}-pager`);
  bar.dataset.k = 'pager';
  bar.dataset.page = String(page);
  bar.appendChild(searchBox(state));
  const first = shown ? page * PAGE_ROWS + 1 : 0;
  const last = Math.min(shown, (page + 1) * PAGE_ROWS);
  const filtered = state.search.trim() !== '';
  const text = filtered
    ? `rows ${count(first)}\u2013${count(last)} of ${count(shown)} matching (${count(all)} ranks)`
    : `rows ${count(first)}\u2013${count(last)} of ${count(all)}`;
  bar.appendChild(el('span', `${P}-pageInfo`, shown || !filtered ? text : 'no rank matches'));
  bar.appendChild(pageButton('\u2039 Prev', page - 1, page <= 0, 'page'));
  bar.appendChild(pageButton('Next \u203a', page + 1, page >= pages - 1, 'page'));
  return bar;
}

function headRow(state: IViewState): HTMLElement {
  const thead = el('thead');
  const hr = el('tr');
  const columns: Array<[string, string, string]> = [
    ['Rank', 'num', 'rank'],
    ['Host', '', 'host'],
    ['State', '', 'state'],
    ['Step', 'num', 'step'],
    ['Rate', 'num', 'rate'],
    ['Loss', 'num', 'loss']
  ];
  for (const [name, cls, key] of columns) {
    const th = el('th', cls ? `${P}-${cls}` : '');
    th.dataset.col = key;
    if (SORTABLE.includes(key)) {
      const on = state.sort === key;
      th.classList.add(`${P}-sortable`);
      th.dataset.action = 'sort';
      th.dataset.sort = key;
      th.title = on && !state.sortDesc ? `Sort by ${key}, highest first` : on ? 'Sort by rank' : `Sort by ${key}`;
      th.setAttribute('aria-sort', on ? (state.sortDesc ? 'descending' : 'ascending') : 'none');
      th.textContent = on ? `${name} ${state.sortDesc ? '\u25bc' : '\u25b2'}` : name;
    } else {
      th.textContent = name;
    }
    hr.appendChild(th);
  }
  thead.appendChild(hr);
  return thead;
}

function pageRow(r: ITableRow, featured: boolean, open: boolean, root: boolean): HTMLElement {
  const row = el('tr', `${P}-pageRow ${P}-row-${token(r.state)}`);
  row.dataset.rank = String(r.rank);
  row.dataset.state = r.state;
  row.dataset.action = 'open-rank';
  row.classList.toggle(`${P}-picked`, open);
  row.classList.toggle(`${P}-root`, root);
  row.classList.toggle(`${P}-featured`, featured);
  row.title = `Show rank ${r.rank}`;
  row.appendChild(el('td', `${P}-num ${P}-rankId`, String(r.rank)));
  const host = el('td', `${P}-host`, clip(r.host, 32) || DASH);
  if (r.host.length > 32) {
    host.title = r.host;
  }
  row.appendChild(host);
  const state = el('td');
  state.appendChild(el('span', `${P}-pill ${P}-state-${token(r.state)}`, r.state));
  row.appendChild(state);
  row.appendChild(el('td', `${P}-num ${P}-steps`, r.step === null ? DASH : count(r.step)));
  row.appendChild(el('td', `${P}-num ${P}-rate`, rate(r.rate)));
  row.appendChild(el('td', `${P}-num ${P}-lossCell`, r.loss === null ? DASH : metric(r.loss, true)));
  return row;
}

/** The search, the pager and one page of ranks. */
export function pagedTable(
  table: ITable | null,
  featured: Set<number>,
  rootRank: number | null,
  state: IViewState
): HTMLElement {
  const box = el('div', `${P}-paged`);
  box.dataset.k = 'paged';
  const all = tableRows(table);
  const rows = sortRows(filterRows(all, state.search), state.sort, state.sortDesc);
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));
  const page = Math.max(0, Math.min(state.page, pages - 1));
  box.appendChild(pager(rows.length, all.length, page, pages, state));
  const wrap = el('div', `${P}-tableWrap ${P}-pageWrap`);
  const t = el('table', `${P}-table ${P}-pageTable`);
  t.appendChild(headRow(state));
  const body = el('tbody');
  for (const r of rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS)) {
    body.appendChild(pageRow(r, featured.has(r.rank), r.rank === state.openRank, r.rank === rootRank));
  }
  t.appendChild(body);
  wrap.appendChild(t);
  box.appendChild(wrap);
  if (!all.length) {
    box.appendChild(el('div', `${P}-muted`, 'No ranks reported yet.'));
  }
  return box;
}

function closeButton(): HTMLElement {
  const close = el('button', `${P}-link ${P}-closeRank`, 'close');
  close.type = 'button';
  close.dataset.action = 'close-rank';
  return close;
}

function detailHead(id: number, r: IRankSnapshot | ITableRow | null): HTMLElement {
  const head = el('div', `${P}-rankDetailHead`);
  head.appendChild(el('strong', '', `Rank ${id}`));
  const host = str(r?.host);
  if (host) {
    head.appendChild(el('span', `${P}-host`, clip(host, 40)));
  }
  const s = str(r?.state);
  if (s) {
    head.appendChild(el('span', `${P}-pill ${P}-state-${token(s)}`, s));
  }
  return head;
}

/** The head's progress: the full row's step and rate, else the table row's. */
function detailProgress(head: HTMLElement, full: IRankSnapshot | null, brief: ITableRow | null): void {
  if (full) {
    const progress = progressCell(full);
    const line = el('span', `${P}-rankDetailProgress`);
    line.append(...Array.from(progress.childNodes));
    head.appendChild(line);
    head.appendChild(el('span', `${P}-rate`, rate(full.rate)));
  } else if (brief) {
    head.appendChild(
      el('span', `${P}-muted`, `step ${brief.step === null ? DASH : count(brief.step)} \u00b7 ${rate(brief.rate)}`)
    );
  }
}

/** Why the rank has no full row: it is loading (live), or the snapshot keeps none. */
function detailNote(id: number, live: ILiveOptions | null): HTMLElement {
  return el(
    'div',
    `${P}-muted ${P}-rankDetailNote`,
    live ? `loading rank ${id}\u2026` : 'details are kept for failed and outlier ranks only'
  );
}

/** The rank's error, with the run's traceback when this rank is its root cause. */
function rankError(id: number, full: IRankSnapshot, error: IRunError | null): HTMLElement | null {
  const err = str(full.error);
  const root = error !== null && num(error.rank) === id;
  const tb = root ? str(error.traceback).replace(/\s+$/, '') : '';
  if (!err && !tb) {
    return null;
  }
  const errorBox = el('div', `${P}-rankError`);
  if (err) {
    errorBox.appendChild(el('div', `${P}-errorSummary`, err));
  }
  if (tb) {
    errorBox.appendChild(el('pre', `${P}-traceback`, tb));
  }
  return errorBox;
}

/** The open rank: its full row (error, stack, loss, log) when the snapshot has it, else why not. */
export function rankDetail(
  id: number,
  full: IRankSnapshot | null,
  brief: ITableRow | null,
  error: IRunError | null,
  state: IViewState,
  live: ILiveOptions | null
): HTMLElement {
  const box = el('div', `${P}-rankDetail`);
  box.dataset.k = `rank-${id}`;
  box.dataset.rank = String(id);
  const head = detailHead(id, full ?? brief);
  detailProgress(head, full, brief);
  head.appendChild(closeButton());
  box.appendChild(head);
  if (!full) {
    box.dataset.loading = live ? 'true' : 'false';
    box.appendChild(detailNote(id, live));
    return box;
  }
  const errorBox = rankError(id, full, error);
  if (errorBox) {
    box.appendChild(errorBox);
  }
  const place = isObject(full.place) ? (full.place as IPlace) : null;
  if (place) {
    box.appendChild(rankPlace(id, place));
  }
  const chart = chartSection([full]);
  if (chart) {
    box.appendChild(chart);
  }
  box.appendChild(logBody(full, id, state, live !== null));
  return box;
}

/** The snapshot's full rows by rank. */
export function fullRows(ranks: IRankSnapshot[]): Map<number, IRankSnapshot> {
  const out = new Map<number, IRankSnapshot>();
  ranks.forEach((r, i) => out.set(rankId(r, i), r));
  return out;
}
