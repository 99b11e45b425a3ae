/**
 * The per-rank table: one row per rank, with state, progress, rate, metrics, elapsed, exit, last output.
 */
import { el, isObject, rankId, token } from './dom';
import { clip, clock, count, DASH, duration, metric, num, rate, str } from './format';
import { ILiveOptions, LOSS_KEYS, P, RANK_FINAL } from './model';
import { IRankSnapshot } from './types';
import { inputBound, usageCell, usageColumns } from './usage';

/** Metric entries with the loss first, then the rest in their given order. */
function orderedMetrics(metrics: unknown): Array<[string, unknown]> {
  if (!isObject(metrics)) {
    return [];
  }
  const entries = Object.entries(metrics);
  const weight = (k: string): number => (LOSS_KEYS.includes(k) ? 0 : k.endsWith('loss') ? 1 : 2);
  return entries
    .map((e, i) => ({ e, i }))
    .sort((a, b) => weight(a.e[0]) - weight(b.e[0]) || a.i - b.i)
    .map(x => x.e);
}

/** A step/total bar and count (a rank's row; a sweep's run in `compare.ts`). */
export function progressCell(r: Pick<IRankSnapshot, 'step' | 'total'>): HTMLElement {
  const cell = el('td', `${P}-progress`);
  const step = num(r.step);
  const total = num(r.total);
  if (step === null) {
    cell.appendChild(el('span', `${P}-steps`, DASH));
    return cell;
  }
  if (total !== null && total > 0) {
    const frac = Math.max(0, Math.min(1, step / total));
    const bar = el('span', `${P}-bar`);
    const fill = el('span', `${P}-barFill`);
    fill.style.width = `${(frac * 100).toFixed(1)}%`;
    bar.appendChild(fill);
    bar.title = `${(frac * 100).toFixed(0)}%`;
    cell.appendChild(bar);
    cell.appendChild(el('span', `${P}-steps`, `${count(step)}/${count(total)}`));
  } else {
    cell.appendChild(el('span', `${P}-steps`, `step ${count(step)}`));
  }
  return cell;
}

function exitText(r: IRankSnapshot): string {
  const signal = str(r.exit_signal);
  if (signal) {
    return signal;
  }
  const code = num(r.exit_code);
  return code === null ? DASH : String(code);
}

function rankElapsed(r: IRankSnapshot, live: ILiveOptions | null): string {
  const s = num(r.elapsed_s);
  if (s === null) {
    return DASH;
  }
  if (live && !RANK_FINAL.includes(str(r.state))) {
    return clock(s + live.extra);
  }
  return live ? clock(s) : duration(s);
}

function metricsCell(r: IRankSnapshot, live: ILiveOptions | null): HTMLElement {
  const cell = el('td', `${P}-metrics`);
  const metrics = orderedMetrics(r.metrics);
  if (!metrics.length) {
    cell.textContent = DASH;
  }
  for (const [key, value] of metrics.slice(0, 6)) {
    const m = el('span', `${P}-metric`);
    m.appendChild(el('span', `${P}-metricKey`, clip(key, 24)));
    m.appendChild(document.createTextNode(` ${metric(value, live !== null)}`));
    cell.appendChild(m);
  }
  if (metrics.length > 6) {
    cell.appendChild(el('span', `${P}-metricKey`, `+${metrics.length - 6}`));
    cell.title = metrics.map(([k, v]) => `${k}=${metric(v)}`).join('\n');
  }
  return cell;
}

function lastCell(r: IRankSnapshot): HTMLElement {
  const err = str(r.error);
  const last = err || str(r.last_line);
  const cell = el('td', `${P}-last`, last ? clip(last, 200) : '');
  if (err) {
    cell.classList.add(`${P}-lastError`);
  }
  if (last) {
    cell.title = last;
  }
  return cell;
}

function hostCell(r: IRankSnapshot): HTMLElement {
  const host = str(r.host);
  const cell = el('td', `${P}-host`, host ? clip(host, 32) : DASH);
  if (host.length > 32) {
    cell.title = host;
  }
  return cell;
}

/** What the table marks about one row: its id, state, whether it is the root cause or the shown log. */
interface IRowMarks {
  id: number;
  root: boolean;
  picked: boolean;
  showExit: boolean;
  usage: string[];
}

function usageCells(r: IRankSnapshot, columns: string[], row: HTMLElement): void {
  for (const column of columns) {
    const cell = el('td', `${P}-num ${P}-usage`, usageCell(r, column));
    cell.dataset.col = column;
    if (column === 'Input wait' && inputBound(r)) {
      cell.classList.add(`${P}-inputBound`);
      cell.title = 'This rank waits for data more than 30% of the time';
    }
    row.appendChild(cell);
  }
}

function rankRow(r: IRankSnapshot, marks: IRowMarks, live: ILiveOptions | null): HTMLElement {
  const s = str(r.state) || 'pending';
  const row = el('tr', `${P}-rank ${P}-row-${token(s)}`);
  row.classList.toggle(`${P}-root`, marks.root);
  row.classList.toggle(`${P}-picked`, marks.picked);
  row.dataset.rank = String(marks.id);
  row.dataset.state = s;
  row.dataset.action = 'pick';
  row.title = 'Show this rank\u2019s log';
  row.appendChild(el('td', `${P}-num ${P}-rankId`, String(marks.id)));
  row.appendChild(hostCell(r));
  const stateCell = el('td');
  const paused = str(r.paused);
  stateCell.appendChild(
    paused
      ? el('span', `${P}-pill ${P}-state-paused`, `paused (${paused})`)
      : el('span', `${P}-pill ${P}-state-${token(s)}`, s)
  );
  if (paused) {
    row.dataset.paused = paused;
  }
  row.appendChild(stateCell);
  row.appendChild(progressCell(r));
  row.appendChild(el('td', `${P}-num ${P}-rate`, rate(r.rate)));
  usageCells(r, marks.usage, row);
  row.appendChild(metricsCell(r, live));
  row.appendChild(el('td', `${P}-num ${P}-rankElapsed`, rankElapsed(r, live)));
  if (marks.showExit) {
    row.appendChild(el('td', `${P}-num`, exitText(r)));
  }
  row.appendChild(lastCell(r));
  return row;
}

function headRow(showExit: boolean, usage: string[]): HTMLElement {
  const columns: Array<[string, string]> = [
    ['Rank', 'num'],
    ['Host', ''],
    ['State', ''],
    ['Progress', ''],
    ['Rate', 'num'],
    ...usage.map(u => [u, 'num'] as [string, string]),
    ['Metrics', ''],
    ['Elapsed', 'num'],
    ...(showExit ? [['Exit', 'num'] as [string, string]] : []),
    ['Last output', '']
  ];
  const thead = el('thead');
  const hr = el('tr');
  for (const [name, cls] of columns) {
    hr.appendChild(el('th', cls ? `${P}-${cls}` : '', name));
  }
  thead.appendChild(hr);
  return thead;
}

/** One row per rank; the exit column only once a rank has exited (during a run it is all dashes). */
export function rankTable(
  ranks: IRankSnapshot[],
  rootRank: number | null,
  selected: number | null,
  live: ILiveOptions | null
): HTMLElement {
  const wrap = el('div', `${P}-tableWrap`);
  wrap.dataset.k = 'table';
  const table = el('table', `${P}-table`);
  const showExit = ranks.some(r => exitText(r) !== DASH);
  const usage = usageColumns(ranks);
  table.appendChild(headRow(showExit, usage));
  const body = el('tbody');
  ranks.forEach((r, i) => {
    const id = rankId(r, i);
    const marks = { id, root: id === rootRank, picked: id === selected, showExit, usage };
    body.appendChild(rankRow(r, marks, live));
  });
  table.appendChild(body);
  wrap.appendChild(table);
  return wrap;
}
