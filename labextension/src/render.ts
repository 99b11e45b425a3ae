/**
 * Build the DOM of a run report (saved, or live while the run goes on) from a snapshot.
 *
 * Pure: a snapshot and the user's view state in, a detached element out.
 * `view.ts` patches it into the page. All text goes through `textContent`
 * or `setAttribute`: nothing from the snapshot is ever parsed as HTML, so
 * the renderer is safe for untrusted notebooks. Interactive elements carry
 * `data-action` attributes; the view handles their events by delegation.
 */
import { cleanPoints, ISeries, lossChart, PALETTE } from './chart';
import { clip, clock, count, DASH, duration, metric, num, rate, str } from './format';
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

/** Run statuses during which a Stop control makes sense. */
export const IN_FLIGHT = ['starting', 'running', 'stopping'];

/** Rank states after which a rank's clock no longer runs. */
const RANK_FINAL = ['done', 'failed', 'stopped'];

/** Log lines shown before "show all"; the pane scrolls to the rest either way. */
export const LOG_PREVIEW_LINES = 12;

/** What the user changed in a report, carried across redraws (live updates). */
export interface IViewState {
  /** Sections the user opened or closed, by key, where that differs from the default. */
  details: Record<string, boolean>;
  /** The rank whose log the user picked; null: the default one. */
  logRank: number | null;
  /** Show every log line of the snapshot at full height. */
  logAll: boolean;
}

/** What the Stop control shows. */
export type StopState = 'ready' | 'sent' | 'hint' | 'unreachable';

/** Extras of the live view. */
export interface ILiveOptions {
  stop: StopState;
  /** Seconds since the snapshot arrived: clocks of a running run keep ticking. */
  extra: number;
}

export function emptyState(): IViewState {
  return { details: {}, logRank: null, logAll: false };
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

function token(value: string): string {
  return value.replace(/[^a-z]/g, '');
}

function rankId(r: IRankSnapshot, index: number): number {
  const n = num(r.rank);
  return n === null ? index : n;
}

function details(
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

function stopControl(status: string, stop: StopState): HTMLElement | null {
  if (!IN_FLIGHT.includes(status)) {
    return null;
  }
  if (stop === 'hint' || stop === 'unreachable') {
    const text =
      stop === 'hint'
        ? 'To stop, interrupt the kernel'
        : 'Could not reach the kernel: use Kernel \u25b8 Interrupt';
    const hint = el('span', `${P}-stopHint`, text);
    hint.title =
      stop === 'hint'
        ? 'This front end lacks the jupyter-torchdist extension: use its Interrupt button (\u25a0) ' +
          'to stop every rank.'
        : 'The notebook holding this view was not found.';
    return hint;
  }
  const stopping = stop === 'sent' || status === 'stopping';
  const button = el('button', `${P}-stop`);
  button.type = 'button';
  button.dataset.action = 'stop';
  button.disabled = stopping;
  button.title = 'Stop the run: interrupts this notebook\u2019s kernel, which stops every rank';
  button.appendChild(el('span', `${P}-stopIcon`));
  button.appendChild(document.createTextNode(stopping ? 'Stopping\u2026' : 'Stop'));
  return button;
}

function header(
  snap: IRunSnapshot,
  ranks: IRankSnapshot[],
  live: ILiveOptions | null
): HTMLElement {
  const status = str(snap.status) || 'unknown';
  const head = el('div', `${P}-header`);
  head.dataset.k = 'header';
  const top = el('div', `${P}-headerTop`);
  const badge = el('span', `${P}-badge ${P}-status-${token(status)}`);
  badge.textContent = STATUS_LABEL[status] ?? status;
  top.appendChild(badge);
  top.appendChild(el('span', `${P}-title`, str(snap.title) || '%%distribute'));

  const meta = el('span', `${P}-meta`);
  const parts: string[] = [];
  if (str(snap.backend)) {
    parts.push(str(snap.backend));
  }
  const world = num(snap.world_size) ?? ranks.length;
  parts.push(`${world} rank${world === 1 ? '' : 's'}`);
  meta.appendChild(document.createTextNode(`${parts.join(' \u00b7 ')} \u00b7 `));
  const elapsed = num(snap.elapsed_s);
  const ticking = live !== null && IN_FLIGHT.includes(status) && elapsed !== null;
  const time = el(
    'span',
    `${P}-elapsed`,
    ticking ? clock((elapsed as number) + live.extra) : duration(elapsed)
  );
  time.title = 'elapsed';
  meta.appendChild(time);
  top.appendChild(meta);
  const stop = live ? stopControl(status, live.stop) : null;
  if (stop) {
    top.appendChild(stop);
  }
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
      chip.appendChild(el('span', `${P}-dot ${P}-state-${token(s)}`));
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

function failure(error: IRunError, state: IViewState): HTMLElement {
  const box = el('div', `${P}-error`);
  box.dataset.k = 'error';
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
  box.dataset.k = 'value';
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
  box.dataset.k = 'loss';
  box.appendChild(el('div', `${P}-panelTitle`, 'Loss'));
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

function rankTable(
  ranks: IRankSnapshot[],
  rootRank: number | null,
  selected: number | null,
  live: ILiveOptions | null
): HTMLElement {
  const wrap = el('div', `${P}-tableWrap`);
  wrap.dataset.k = 'table';
  const table = el('table', `${P}-table`);
  const thead = el('thead');
  const hr = el('tr');
  // The exit column only once a rank has exited: during a run it is all dashes.
  const showExit = ranks.some(r => exitText(r) !== DASH);
  const columns: Array<[string, string]> = [
    ['Rank', 'num'],
    ['Host', ''],
    ['State', ''],
    ['Progress', ''],
    ['Rate', 'num'],
    ['Metrics', ''],
    ['Elapsed', 'num'],
    ...(showExit ? [['Exit', 'num'] as [string, string]] : []),
    ['Last output', '']
  ];
  for (const [name, cls] of columns) {
    hr.appendChild(el('th', cls ? `${P}-${cls}` : '', name));
  }
  thead.appendChild(hr);
  table.appendChild(thead);
  const body = el('tbody');
  ranks.forEach((r, i) => {
    const id = rankId(r, i);
    const s = str(r.state) || 'pending';
    const row = el('tr', `${P}-rank ${P}-row-${token(s)}`);
    if (id === rootRank) {
      row.classList.add(`${P}-root`);
    }
    if (id === selected) {
      row.classList.add(`${P}-picked`);
    }
    row.dataset.rank = String(id);
    row.dataset.state = s;
    row.dataset.action = 'pick';
    row.title = 'Show this rank\u2019s log';

    row.appendChild(el('td', `${P}-num ${P}-rankId`, String(id)));
    const host = str(r.host);
    const hostCell = el('td', `${P}-host`, host ? clip(host, 32) : DASH);
    if (host.length > 32) {
      hostCell.title = host;
    }
    row.appendChild(hostCell);
    const stateCell = el('td');
    stateCell.appendChild(el('span', `${P}-pill ${P}-state-${token(s)}`, s));
    row.appendChild(stateCell);
    row.appendChild(progressCell(r));
    row.appendChild(el('td', `${P}-num ${P}-rate`, rate(r.rate)));

    const metricsCell = el('td', `${P}-metrics`);
    const metrics = orderedMetrics(r.metrics);
    if (!metrics.length) {
      metricsCell.textContent = DASH;
    }
    for (const [key, value] of metrics.slice(0, 6)) {
      const m = el('span', `${P}-metric`);
      m.appendChild(el('span', `${P}-metricKey`, clip(key, 24)));
      m.appendChild(document.createTextNode(` ${metric(value, live !== null)}`));
      metricsCell.appendChild(m);
    }
    if (metrics.length > 6) {
      metricsCell.appendChild(el('span', `${P}-metricKey`, `+${metrics.length - 6}`));
      metricsCell.title = metrics.map(([k, v]) => `${k}=${metric(v)}`).join('\n');
    }
    row.appendChild(metricsCell);
    row.appendChild(el('td', `${P}-num ${P}-rankElapsed`, rankElapsed(r, live)));
    if (showExit) {
      row.appendChild(el('td', `${P}-num`, exitText(r)));
    }

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

function logBody(
  r: IRankSnapshot | undefined,
  id: number,
  state: IViewState,
  live: boolean
): HTMLElement {
  const box = el('div', `${P}-logBody`);
  const tail = r && Array.isArray(r.log_tail) ? r.log_tail : [];
  const total = num(r?.log_lines) ?? tail.length;
  const info = el('div', `${P}-logInfo`);
  const host = str(r?.host);
  const shown =
    total > tail.length
      ? `last ${count(tail.length)} of ${count(total)} lines`
      : `${count(total)} line${total === 1 ? '' : 's'}`;
  info.appendChild(
    el('span', '', `rank ${id}${host ? ` \u00b7 ${host}` : ''} \u00b7 ${shown}`)
  );
  if (tail.length > LOG_PREVIEW_LINES) {
    const all = el(
      'button',
      `${P}-link`,
      state.logAll ? 'show less' : `show all ${count(tail.length)}`
    );
    all.type = 'button';
    all.dataset.action = 'log-all';
    info.appendChild(all);
  }
  if (total > tail.length) {
    const where = el('span', `${P}-logWhere`);
    where.appendChild(document.createTextNode('every line, in the kernel: '));
    where.appendChild(el('code', '', `jupyter_torchdist.magic.last_run().logs[${id}]`));
    info.appendChild(where);
  }
  box.appendChild(info);
  const pre = el('pre', `${P}-log${state.logAll ? ` ${P}-logAll` : ''}`);
  pre.dataset.rank = String(id);
  if (!tail.length) {
    pre.appendChild(el('span', `${P}-muted`, live ? 'no output yet' : 'no output'));
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
  state: IViewState,
  live: boolean
): HTMLDetailsElement {
  const total = ranks.reduce((acc, r) => acc + (num(r.log_lines) ?? 0), 0);
  const n = ranks.length;
  const title =
    total > 0
      ? `Logs \u00b7 ${count(total)} line${total === 1 ? '' : 's'} from ${n} rank${n === 1 ? '' : 's'}`
      : `Logs \u00b7 no output${live ? ' yet' : ''}`;
  const section = details('logs', title, open, state, `${P}-logs`);
  const tabs = el('div', `${P}-tabs`);
  tabs.setAttribute('role', 'tablist');
  let picked: IRankSnapshot | undefined;
  ranks.forEach((r, i) => {
    const id = rankId(r, i);
    const s = str(r.state) || 'pending';
    const tab = el('button', `${P}-tab ${P}-tab-${token(s)}`, String(id));
    tab.type = 'button';
    tab.dataset.rank = String(id);
    tab.dataset.action = 'pick';
    tab.setAttribute('role', 'tab');
    tab.title = `rank ${id} \u00b7 ${s} \u00b7 ${count(r.log_lines)} lines`;
    const on = id === selected;
    tab.setAttribute('aria-selected', on ? 'true' : 'false');
    if (on) {
      tab.classList.add(`${P}-tabOn`);
      picked = r;
    }
    tabs.appendChild(tab);
  });
  section.appendChild(tabs);
  section.appendChild(logBody(picked, selected, state, live));
  return section;
}

/** The rank whose log shows: the user's pick, else the root cause, a failed rank, or the first. */
export function selectedRank(snap: IRunSnapshot, state: IViewState): number | null {
  const ranks = Array.isArray(snap.ranks) ? (snap.ranks.filter(isObject) as IRankSnapshot[]) : [];
  if (!ranks.length) {
    return null;
  }
  const ids = ranks.map((r, i) => rankId(r, i));
  const error = isObject(snap.error) ? (snap.error as IRunError) : null;
  const rootRank = error ? num(error.rank) : null;
  const firstFailed = ranks.findIndex(r => r.state === 'failed');
  const choice = state.logRank ?? rootRank ?? (firstFailed >= 0 ? ids[firstFailed] : ids[0]);
  return ids.includes(choice) ? choice : ids[0];
}

/** The whole report; `live` adds the Stop control and ticking clocks. */
export function renderReport(
  data: unknown,
  state: IViewState,
  live: ILiveOptions | null = null
): HTMLElement {
  const snap: IRunSnapshot = isObject(data) ? (data as IRunSnapshot) : {};
  const ranks: IRankSnapshot[] = Array.isArray(snap.ranks)
    ? (snap.ranks.filter(isObject) as IRankSnapshot[])
    : [];
  const report = el('div', `${P}-report${live ? ` ${P}-isLive` : ''}`);
  report.dataset.status = str(snap.status);
  report.appendChild(header(snap, ranks, live));

  const error = isObject(snap.error) ? (snap.error as IRunError) : null;
  if (error) {
    report.appendChild(failure(error, state));
  }

  const value = snap.value_repr;
  const chart = chartSection(ranks);
  if ((value !== null && value !== undefined) || chart) {
    const row = el('div', `${P}-panels`);
    row.dataset.k = 'panels';
    if (value !== null && value !== undefined) {
      row.appendChild(valueSection(str(value)));
    }
    if (chart) {
      row.appendChild(chart);
    }
    report.appendChild(row);
  }

  const selected = selectedRank(snap, state);
  if (selected === null) {
    const none = el('div', `${P}-muted`, 'No ranks reported.');
    none.dataset.k = 'none';
    report.appendChild(none);
    return report;
  }
  const rootRank = error ? num(error.rank) : null;
  const logsOpen = state.details.logs ?? error !== null;
  report.appendChild(rankTable(ranks, rootRank, logsOpen ? selected : null, live));
  report.appendChild(logsSection(ranks, selected, error !== null, state, live !== null));
  return report;
}
