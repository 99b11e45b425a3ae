/**
 * Build the DOM of a run report from a snapshot.
 *
 * All text goes through `textContent` or `setAttribute`: nothing from the
 * snapshot is ever parsed as HTML, so the renderer is safe for untrusted
 * notebooks.
 */
import { cleanPoints, ISeries, lossChart, PALETTE } from './chart';
import { clip, count, DASH, duration, metric, num, rate, str } from './format';
import { IRankSnapshot, IRunError, IRunSnapshot } from './types';

const P = 'jp-TorchDist';

const STATUS_LABEL: Record<string, string> = {
  succeeded: 'Succeeded',
  failed: 'Failed',
  timeout: 'Timed out',
  interrupted: 'Interrupted',
  running: 'Running',
  starting: 'Starting',
  stopping: 'Stopping'
};

const KIND_LABEL: Record<string, string> = {
  exception: 'raised an exception',
  exit: 'process exited',
  lost: 'lost by the launcher',
  launch: 'failed to launch'
};

const LOSS_KEYS = ['loss', 'train_loss', 'training_loss'];

/** Rank states in the order the summary counts them. */
const STATE_ORDER = ['running', 'starting', 'pending', 'done', 'stopped', 'failed'];

/** What the user changed in a report, carried across re-renders (live updates). */
export interface IViewState {
  details: Record<string, boolean>;
  logRank: number | null;
  tableScroll: number;
  /** null: follow the end of the log. */
  logScroll: number | null;
}

function el<K extends keyof HTMLElementTagNameMap>(
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

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function rankId(r: IRankSnapshot, index: number): number {
  const n = num(r.rank);
  return n === null ? index : n;
}

function details(
  key: string,
  summary: HTMLElement | string,
  openByDefault: boolean,
  state: IViewState | null,
  cls: string
): HTMLDetailsElement {
  const node = el('details', cls);
  node.dataset.key = key;
  node.dataset.default = openByDefault ? 'open' : 'closed';
  const remembered = state?.details[key];
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

/** Read what the user changed in an already rendered report. */
export function captureState(root: HTMLElement): IViewState | null {
  const report = root.querySelector<HTMLElement>(`.${P}-report`);
  if (!report) {
    return null;
  }
  const state: IViewState = { details: {}, logRank: null, tableScroll: 0, logScroll: null };
  // Only what differs from the defaults: a section that opens by default
  // later (say, the logs once a rank fails) still opens unless closed by hand.
  report.querySelectorAll<HTMLDetailsElement>('details[data-key]').forEach(d => {
    if (d.open !== (d.dataset.default === 'open')) {
      state.details[d.dataset.key as string] = d.open;
    }
  });
  const picked = report.dataset.logPicked;
  state.logRank = picked === undefined ? null : Number(picked);
  const table = report.querySelector<HTMLElement>(`.${P}-tableWrap`);
  state.tableScroll = table ? table.scrollTop : 0;
  const log = report.querySelector<HTMLElement>(`.${P}-log`);
  if (log && log.scrollHeight - log.scrollTop - log.clientHeight > 4) {
    state.logScroll = log.scrollTop;
  }
  return state;
}

/** Restore scroll positions once the new report is in the document. */
export function restoreScroll(root: HTMLElement, state: IViewState | null): void {
  const table = root.querySelector<HTMLElement>(`.${P}-tableWrap`);
  if (table && state) {
    table.scrollTop = state.tableScroll;
  }
  const log = root.querySelector<HTMLElement>(`.${P}-log`);
  if (log) {
    log.scrollTop = state?.logScroll ?? log.scrollHeight;
  }
}

function header(snap: IRunSnapshot, ranks: IRankSnapshot[]): HTMLElement {
  const status = str(snap.status) || 'unknown';
  const head = el('div', `${P}-header`);
  const top = el('div', `${P}-headerTop`);
  const badge = el('span', `${P}-badge ${P}-status-${status.replace(/[^a-z]/g, '')}`);
  badge.textContent = STATUS_LABEL[status] ?? status;
  top.appendChild(badge);
  top.appendChild(el('span', `${P}-title`, str(snap.title) || '%%distribute'));

  const meta: string[] = [];
  if (str(snap.backend)) {
    meta.push(str(snap.backend));
  }
  const world = num(snap.world_size) ?? ranks.length;
  meta.push(`${world} rank${world === 1 ? '' : 's'}`);
  meta.push(duration(snap.elapsed_s));
  top.appendChild(el('span', `${P}-meta`, meta.join(' \u00b7 ')));
  head.appendChild(top);

  if (str(snap.headline)) {
    head.appendChild(el('div', `${P}-headline`, str(snap.headline)));
  }

  const chips = el('div', `${P}-chips`);
  const tally = new Map<string, number>();
  for (const r of ranks) {
    const s = str(r.state) || 'pending';
    tally.set(s, (tally.get(s) ?? 0) + 1);
  }
  const order = [...STATE_ORDER, ...[...tally.keys()].filter(k => !STATE_ORDER.includes(k))];
  for (const s of order) {
    const n = tally.get(s);
    if (n) {
      const chip = el('span', `${P}-chip`);
      chip.appendChild(el('span', `${P}-dot ${P}-state-${s.replace(/[^a-z]/g, '')}`));
      chip.appendChild(document.createTextNode(`${n} ${s}`));
      chips.appendChild(chip);
    }
  }
  const options = isObject(snap.options) ? snap.options : {};
  for (const [key, value] of Object.entries(options)) {
    if (key === 'n' || value === null || value === false || value === undefined) {
      continue;
    }
    const text = Array.isArray(value) ? value.join(' ') : str(value);
    const shown = value === true ? key : `${key}=${clip(text, 40)}`;
    chips.appendChild(el('span', `${P}-option`, shown));
  }
  head.appendChild(chips);
  return head;
}

function failure(error: IRunError, state: IViewState | null): HTMLElement {
  const box = el('div', `${P}-error`);
  const where = el('div', `${P}-errorWhere`);
  const rank = num(error.rank);
  where.appendChild(el('strong', '', rank === null ? 'A rank' : `Rank ${rank}`));
  const host = str(error.host);
  if (host) {
    where.appendChild(document.createTextNode(' on '));
    where.appendChild(el('strong', '', host));
  }
  const kind = str(error.kind);
  where.appendChild(document.createTextNode(` ${KIND_LABEL[kind] ?? 'failed'}`));
  if (kind) {
    where.appendChild(el('span', `${P}-kind`, kind));
  }
  box.appendChild(where);
  box.appendChild(el('div', `${P}-errorSummary`, str(error.summary) || 'failed'));
  const tb = str(error.traceback).replace(/\s+$/, '');
  if (tb) {
    box.appendChild(el('pre', `${P}-traceback`, tb));
  }
  const secondary = Array.isArray(error.secondary) ? error.secondary.filter(isObject) : [];
  if (secondary.length) {
    const n = secondary.length;
    const more = details(
      'secondary',
      `${n} other rank${n === 1 ? '' : 's'} failed too (most likely as a consequence)`,
      false,
      state,
      `${P}-secondary`
    );
    const list = el('ul', `${P}-secondaryList`);
    for (const s of secondary) {
      const item = el('li');
      const r = num(s.rank);
      const label = `rank ${r === null ? '?' : r}${str(s.host) ? ` \u00b7 ${str(s.host)}` : ''}`;
      item.appendChild(el('span', `${P}-secondaryRank`, label));
      item.appendChild(el('span', `${P}-secondarySummary`, str(s.summary)));
      list.appendChild(item);
    }
    more.appendChild(list);
    box.appendChild(more);
  }
  return box;
}

function valueSection(repr: string): HTMLElement {
  const box = el('div', `${P}-panel ${P}-value`);
  box.appendChild(el('div', `${P}-panelTitle`, 'Value (rank 0)'));
  box.appendChild(el('pre', `${P}-valuePre`, repr));
  return box;
}

function chartSection(ranks: IRankSnapshot[]): HTMLElement | null {
  const series: ISeries[] = [];
  ranks.forEach((r, i) => {
    const points = cleanPoints(r.loss_history);
    if (points.length) {
      series.push({ rank: rankId(r, i), points });
    }
  });
  if (!series.length) {
    return null;
  }
  const box = el('div', `${P}-panel ${P}-loss`);
  const title = el('div', `${P}-panelTitle`, 'Loss');
  box.appendChild(title);
  box.appendChild(lossChart(series));
  const legend = el('div', `${P}-legend`);
  if (series.length <= PALETTE.length) {
    series.forEach((s, i) => {
      const item = el('span', `${P}-legendItem`);
      const swatch = el('span', `${P}-swatch`);
      swatch.style.background = PALETTE[i % PALETTE.length];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(`rank ${s.rank}`));
      legend.appendChild(item);
    });
  } else {
    legend.textContent = `${series.length} ranks`;
  }
  box.appendChild(legend);
  return box;
}

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

function progressCell(r: IRankSnapshot): HTMLElement {
  const cell = el('td', `${P}-progress`);
  const step = num(r.step);
  const total = num(r.total);
  if (step === null) {
    cell.textContent = DASH;
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

function rankTable(
  ranks: IRankSnapshot[],
  rootRank: number | null,
  onPick: (rank: number) => void
): HTMLElement {
  const wrap = el('div', `${P}-tableWrap`);
  const table = el('table', `${P}-table`);
  const thead = el('thead');
  const hr = el('tr');
  for (const [name, cls] of [
    ['Rank', 'num'],
    ['Host', ''],
    ['State', ''],
    ['Progress', ''],
    ['Rate', 'num'],
    ['Metrics', ''],
    ['Elapsed', 'num'],
    ['Exit', 'num'],
    ['Last output', '']
  ]) {
    hr.appendChild(el('th', cls ? `${P}-${cls}` : '', name));
  }
  thead.appendChild(hr);
  table.appendChild(thead);
  const body = el('tbody');
  ranks.forEach((r, i) => {
    const id = rankId(r, i);
    const s = str(r.state) || 'pending';
    const row = el('tr', `${P}-row-${s.replace(/[^a-z]/g, '')}`);
    if (id === rootRank) {
      row.classList.add(`${P}-root`);
    }
    row.title = 'Show this rank\u2019s log';
    row.addEventListener('click', () => onPick(id));

    row.appendChild(el('td', `${P}-num ${P}-rankId`, String(id)));
    const host = str(r.host);
    const hostCell = el('td', `${P}-host`, host ? clip(host, 32) : DASH);
    if (host.length > 32) {
      hostCell.title = host;
    }
    row.appendChild(hostCell);
    const stateCell = el('td');
    const pill = el('span', `${P}-pill ${P}-state-${s.replace(/[^a-z]/g, '')}`, s);
    stateCell.appendChild(pill);
    row.appendChild(stateCell);
    row.appendChild(progressCell(r));
    row.appendChild(el('td', `${P}-num`, rate(r.rate)));

    const metricsCell = el('td', `${P}-metrics`);
    const metrics = orderedMetrics(r.metrics);
    if (!metrics.length) {
      metricsCell.textContent = DASH;
    }
    for (const [key, value] of metrics.slice(0, 6)) {
      const m = el('span', `${P}-metric`);
      m.appendChild(el('span', `${P}-metricKey`, clip(key, 24)));
      m.appendChild(document.createTextNode(` ${metric(value)}`));
      metricsCell.appendChild(m);
    }
    if (metrics.length > 6) {
      metricsCell.appendChild(el('span', `${P}-metricKey`, `+${metrics.length - 6}`));
      metricsCell.title = metrics.map(([k, v]) => `${k}=${metric(v)}`).join('\n');
    }
    row.appendChild(metricsCell);
    row.appendChild(el('td', `${P}-num`, duration(r.elapsed_s)));
    row.appendChild(el('td', `${P}-num`, exitText(r)));

    const err = str(r.error);
    const last = err || str(r.last_line);
    const lastCell = el('td', `${P}-last`, last ? clip(last, 200) : '');
    if (err) {
      lastCell.classList.add(`${P}-lastError`);
    }
    if (last) {
      lastCell.title = last;
    }
    row.appendChild(lastCell);
    body.appendChild(row);
  });
  table.appendChild(body);
  wrap.appendChild(table);
  return wrap;
}

function logBody(r: IRankSnapshot | undefined, id: number): HTMLElement {
  const box = el('div', `${P}-logBody`);
  const tail = r && Array.isArray(r.log_tail) ? r.log_tail : [];
  const total = num(r?.log_lines) ?? tail.length;
  const info = el('div', `${P}-logInfo`);
  const host = str(r?.host);
  const shown =
    total > tail.length
      ? `last ${count(tail.length)} of ${count(total)} lines`
      : `${count(total)} line${total === 1 ? '' : 's'}`;
  info.textContent = `rank ${id}${host ? ` \u00b7 ${host}` : ''} \u00b7 ${shown}`;
  box.appendChild(info);
  const pre = el('pre', `${P}-log`);
  if (!tail.length) {
    pre.appendChild(el('span', `${P}-muted`, 'no output'));
  }
  tail.forEach((entry, i) => {
    const [stream, text] = Array.isArray(entry) ? entry : ['stdout', entry];
    const line = el('span', stream === 'stderr' ? `${P}-stderr` : '', str(text).replace(/\n$/, ''));
    pre.appendChild(line);
    if (i < tail.length - 1) {
      pre.appendChild(document.createTextNode('\n'));
    }
  });
  box.appendChild(pre);
  return box;
}

function logsSection(
  ranks: IRankSnapshot[],
  selected: number,
  open: boolean,
  state: IViewState | null,
  report: HTMLElement
): { node: HTMLDetailsElement; pick: (id: number) => void } {
  const total = ranks.reduce((acc, r) => acc + (num(r.log_lines) ?? 0), 0);
  const n = ranks.length;
  const title = `Logs \u00b7 ${count(total)} lines from ${n} rank${n === 1 ? '' : 's'}`;
  const section = details('logs', title, open, state, `${P}-logs`);
  const tabs = el('div', `${P}-tabs`);
  tabs.setAttribute('role', 'tablist');
  const byId = new Map<number, IRankSnapshot>();
  ranks.forEach((r, i) => byId.set(rankId(r, i), r));
  let body = logBody(byId.get(selected), selected);

  const select = (id: number, follow: boolean): void => {
    report.dataset.logRank = String(id);
    report.dataset.logPicked = String(id);
    tabs.querySelectorAll<HTMLButtonElement>('button').forEach(b => {
      const on = b.dataset.rank === String(id);
      b.classList.toggle(`${P}-tabOn`, on);
      b.setAttribute('aria-selected', on ? 'true' : 'false');
    });
    const next = logBody(byId.get(id), id);
    body.replaceWith(next);
    body = next;
    if (follow) {
      const pre = next.querySelector<HTMLElement>(`.${P}-log`);
      if (pre) {
        pre.scrollTop = pre.scrollHeight;
      }
    }
  };

  ranks.forEach((r, i) => {
    const id = rankId(r, i);
    const s = str(r.state) || 'pending';
    const tab = el('button', `${P}-tab ${P}-tab-${s.replace(/[^a-z]/g, '')}`, String(id));
    tab.type = 'button';
    tab.dataset.rank = String(id);
    tab.setAttribute('role', 'tab');
    tab.title = `rank ${id} \u00b7 ${s} \u00b7 ${count(r.log_lines)} lines`;
    if (id === selected) {
      tab.classList.add(`${P}-tabOn`);
      tab.setAttribute('aria-selected', 'true');
    }
    tab.addEventListener('click', () => select(id, true));
    tabs.appendChild(tab);
  });
  report.dataset.logRank = String(selected);
  if (state?.logRank === selected) {
    report.dataset.logPicked = String(selected);
  }
  section.addEventListener('toggle', () => {
    const pre = section.querySelector<HTMLElement>(`.${P}-log`);
    if (section.open && pre) {
      pre.scrollTop = pre.scrollHeight;
    }
  });
  section.appendChild(tabs);
  section.appendChild(body);
  const pick = (id: number): void => {
    section.open = true;
    select(id, true);
  };
  return { node: section, pick };
}

/** The whole report. */
export function renderReport(data: unknown, state: IViewState | null): HTMLElement {
  const snap: IRunSnapshot = isObject(data) ? (data as IRunSnapshot) : {};
  const ranks: IRankSnapshot[] = Array.isArray(snap.ranks)
    ? (snap.ranks.filter(isObject) as IRankSnapshot[])
    : [];
  const report = el('div', `${P}-report`);
  report.appendChild(header(snap, ranks));

  const error = isObject(snap.error) ? (snap.error as IRunError) : null;
  if (error) {
    report.appendChild(failure(error, state));
  }

  const value = snap.value_repr;
  const chart = chartSection(ranks);
  if ((value !== null && value !== undefined) || chart) {
    const row = el('div', `${P}-panels`);
    if (value !== null && value !== undefined) {
      row.appendChild(valueSection(str(value)));
    }
    if (chart) {
      row.appendChild(chart);
    }
    report.appendChild(row);
  }

  if (!ranks.length) {
    report.appendChild(el('div', `${P}-muted`, 'No ranks reported.'));
    return report;
  }

  const rootRank = error ? num(error.rank) : null;
  const firstFailed = ranks.findIndex(r => r.state === 'failed');
  const ids = ranks.map((r, i) => rankId(r, i));
  let selected =
    state?.logRank ?? rootRank ?? (firstFailed >= 0 ? ids[firstFailed] : ids[0]);
  if (!ids.includes(selected)) {
    selected = ids[0];
  }

  const logs = logsSection(ranks, selected, error !== null, state, report);
  report.appendChild(rankTable(ranks, rootRank, logs.pick));
  report.appendChild(logs.node);
  return report;
}
