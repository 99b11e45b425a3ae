/**
 * A sweep's comparison view (`jupyter_torchdist/views/compare.py`): a row per run with its progress, every
 * run's loss on one chart, a table sortable by any column, and the failed runs named; for a search, what it
 * searches and judges by, the best member marked, members stopped early with their step (the rule's reason as the
 * tooltip), and each parameter's effect (`effects.ts`). Pure: a sweep snapshot and the sort in, a detached
 * element out; `compare_view.ts` patches it into the page, live or saved.
 */
import { cleanPoints, colourOf, lossChart } from './chart';
import { BEST_MARK, headerOf, inTodaysWords, isBest, stateText } from './compare_header';
import { el, isObject, token } from './dom';
import { effectsPanel } from './effects';
import { clip, DASH, duration, metric, num, rate, str } from './format';
import { P } from './model';
import { progressCell } from './table';
import { ISweepRun, ISweepSnapshot } from './types';

/** How the table is sorted: a column key and a direction (null: the grid's order). */
export interface ISort {
  key: string | null;
  descending: boolean;
}

interface IColumn {
  key: string;
  label: string;
  value: (r: ISweepRun) => number | string | null;
  cell: (r: ISweepRun, live: boolean) => HTMLElement;
}

const STATE_RANK: Record<string, number> = {
  running: 0,
  queued: 1,
  done: 2,
  stopped_early: 3,
  stopped: 4,
  failed: 5
};
/** The member columns a search adds, each shown only when some member has it (older snapshots have none). */
const FIGURES: Array<[string, 'steps' | 'metric_best' | 'metric_last']> = [
  ['steps', 'steps'],
  ['best', 'metric_best'],
  ['last', 'metric_last']
];

function text(value: string, cls = ''): HTMLElement {
  return el('td', cls || undefined, value);
}

function runs(snap: ISweepSnapshot): ISweepRun[] {
  return Array.isArray(snap.runs) ? (snap.runs.filter(isObject) as ISweepRun[]) : [];
}

/** The reported metrics' names, less `skip` (the sweep's metric, when its own columns show it). */
function metricNames(rows: ISweepRun[], skip: string | null): string[] {
  const names: string[] = [];
  for (const r of rows) {
    for (const key of Object.keys(isObject(r.metrics) ? r.metrics : {})) {
      if (!names.includes(key) && key !== skip) {
        names.push(key);
      }
    }
  }
  return names;
}

function stateCell(r: ISweepRun, live: boolean): HTMLElement {
  const cell = el('td', `${P}-stateCell`);
  const state = str(r.state) || 'queued';
  const pill = el('span', `${P}-pill ${P}-state-${token(state)}`, stateText(r));
  if (str(r.why)) {
    pill.title = str(r.why);
  } else if (r.past === true) {
    pill.title = 'A member from an earlier kernel of this study';
  }
  cell.appendChild(pill);
  const id = num(r.id);
  if (live && id !== null && !r.past && (state === 'running' || state === 'queued')) {
    const stop = el('button', `${P}-rowStop`, 'Stop');
    stop.type = 'button';
    stop.dataset.action = 'stop';
    stop.dataset.run = String(id);
    stop.title = `Stop run ${id} only (the sweep's other runs go on)`;
    cell.appendChild(stop);
  }
  return cell;
}

function idCell(snap: ISweepSnapshot, r: ISweepRun): HTMLElement {
  if (!isBest(snap, r)) {
    return text(str(r.id));
  }
  const cell = text(`${str(r.id)} ${BEST_MARK}`, `${P}-bestMark`);
  cell.title = `The best member by ${str(snap.metric) || 'the metric'}${snap.mode ? ` (${str(snap.mode)})` : ''}`;
  return cell;
}

/** The search's own columns (steps, the metric's best and last), where some member has them. */
function figureColumns(snap: ISweepSnapshot, rows: ISweepRun[]): IColumn[] {
  const name = str(snap.metric) || 'metric';
  return FIGURES.filter(([, key]) => rows.some(r => num(r[key]) !== null)).map(([label, key]) => ({
    key,
    label: key === 'steps' ? label : `${name} ${label}`,
    value: r => num(r[key]),
    cell: r => text(metric(r[key]) || DASH, `${P}-metrics`)
  }));
}

function columns(snap: ISweepSnapshot, rows: ISweepRun[]): IColumn[] {
  const names = Array.isArray(snap.names) ? snap.names.map(str) : [];
  const figures = figureColumns(snap, rows);
  const metrics = metricNames(rows, figures.some(c => c.key === 'metric_last') ? str(snap.metric) : null);
  const param = (name: string): IColumn => ({
    key: `param:${name}`,
    label: name,
    value: r => paramValue(r, name),
    cell: r => text(clip(str((isObject(r.params) ? r.params : {})[name]), 40), `${P}-param`)
  });
  const figure = (name: string): IColumn => ({
    key: `metric:${name}`,
    label: name,
    value: r => num((isObject(r.metrics) ? r.metrics : {})[name]),
    cell: r => text(metric((isObject(r.metrics) ? r.metrics : {})[name]), `${P}-metrics`)
  });
  return [
    { key: 'id', label: 'run', value: r => num(r.id), cell: r => idCell(snap, r) },
    ...names.map(param),
    { key: 'state', label: 'state', value: r => STATE_RANK[str(r.state)] ?? 9, cell: stateCell },
    { key: 'step', label: 'progress', value: r => num(r.step), cell: progressCell },
    ...figures,
    { key: 'rate', label: 'rate', value: r => num(r.rate), cell: r => text(rate(r.rate)) },
    ...metrics.map(figure),
    { key: 'time', label: 'time', value: r => num(r.elapsed_s), cell: r => text(duration(r.elapsed_s)) },
    { key: 'value', label: 'value', value: r => str(r.value_repr), cell: r => text(clip(str(r.value_repr), 60)) }
  ];
}

function paramValue(r: ISweepRun, name: string): number | string | null {
  const v = (isObject(r.params) ? r.params : {})[name];
  return typeof v === 'number' ? v : v === null || v === undefined ? null : str(v);
}

/** Rows in the sort's order; runs without the figure go last whichever the direction. */
export function sortRuns(rows: ISweepRun[], column: IColumn | null, descending: boolean): ISweepRun[] {
  if (!column) {
    return rows;
  }
  const keyed = rows.map((r, i) => ({ r, i, v: column.value(r) }));
  keyed.sort((a, b) => {
    if (a.v === null || b.v === null) {
      return a.v === null && b.v === null ? a.i - b.i : a.v === null ? 1 : -1;
    }
    const order = a.v < b.v ? -1 : a.v > b.v ? 1 : a.i - b.i;
    return descending ? -order : order;
  });
  return keyed.map(k => k.r);
}

function headRow(cols: IColumn[], sort: ISort): HTMLElement {
  const row = el('tr');
  for (const c of cols) {
    const th = el('th', `${P}-sortable`, c.label);
    th.dataset.action = 'sort';
    th.dataset.key = c.key;
    th.title = `Sort by ${c.label}`;
    if (sort.key === c.key) {
      th.dataset.sorted = sort.descending ? 'desc' : 'asc';
      th.textContent = `${c.label} ${sort.descending ? '\u25bc' : '\u25b2'}`;
    }
    row.appendChild(th);
  }
  return row;
}

function table(snap: ISweepSnapshot, rows: ISweepRun[], sort: ISort, live: boolean): HTMLElement {
  const cols = columns(snap, rows);
  const body = el('tbody');
  for (const r of sortRuns(rows, cols.find(c => c.key === sort.key) ?? null, sort.descending)) {
    const tr = el('tr', `${P}-row ${P}-row-${token(str(r.state))}${isBest(snap, r) ? ` ${P}-row-best` : ''}`);
    tr.dataset.k = `run-${str(r.id)}`;
    cols.forEach(c => tr.appendChild(c.cell(r, live)));
    body.appendChild(tr);
  }
  const thead = el('thead');
  thead.appendChild(headRow(cols, sort));
  const tableEl = el('table', `${P}-table ${P}-compareTable`);
  tableEl.append(thead, body);
  const wrap = el('div', `${P}-tableWrap`);
  wrap.dataset.k = 'table';
  wrap.appendChild(tableEl);
  return wrap;
}

function chart(rows: ISweepRun[]): HTMLElement | null {
  const series = rows
    .map((r, i) => ({ rank: num(r.id) ?? i, label: str(r.label), points: cleanPoints(r.loss) }))
    .filter(s => s.points.length);
  if (!series.length) {
    return null;
  }
  const box = el('div', `${P}-panel ${P}-compareChart`);
  box.dataset.k = 'chart';
  box.appendChild(el('div', `${P}-panelTitle`, 'loss, run by run'));
  box.appendChild(lossChart(series));
  const legend = el('div', `${P}-legend`);
  series.forEach((s, i) => {
    const item = el('span', `${P}-legendItem`);
    const swatch = el('span', `${P}-swatch`);
    swatch.style.background = colourOf(series, i);
    item.append(swatch, document.createTextNode(`run ${s.rank}: ${clip(s.label, 40)}`));
    legend.appendChild(item);
  });
  box.appendChild(legend);
  return box;
}

function failures(rows: ISweepRun[]): HTMLElement | null {
  const failed = rows.filter(r => str(r.state) === 'failed' || str(r.state) === 'stopped');
  if (!failed.length) {
    return null;
  }
  const box = el('div', `${P}-sweepFailures`);
  box.dataset.k = 'failures';
  for (const r of failed) {
    const line = el('div', `${P}-sweepFailure ${P}-state-${token(str(r.state))}`);
    line.textContent = `run ${str(r.id)} (${str(r.label)}) ${str(r.state)}: ${clip(str(r.error) || DASH, 300)}`;
    box.appendChild(line);
  }
  return box;
}

/** The whole comparison view; `live` adds a Stop control to each run still going. */
export function renderCompare(data: unknown, sort: ISort, live: boolean): HTMLElement {
  const snap: ISweepSnapshot = inTodaysWords(isObject(data) ? (data as ISweepSnapshot) : {});
  const rows = runs(snap);
  const root = el('div', `${P}-report ${P}-sweep${live ? ` ${P}-isLive` : ''}`);
  root.dataset.status = str(snap.status);
  root.appendChild(headerOf(snap, rows));
  const failed = failures(rows);
  if (failed) {
    root.appendChild(failed);
  }
  const plot = chart(rows);
  if (plot) {
    root.appendChild(plot);
  }
  const effects = effectsPanel(snap, rows);
  if (effects) {
    root.appendChild(effects);
  }
  root.appendChild(table(snap, rows, sort, live));
  return root;
}
