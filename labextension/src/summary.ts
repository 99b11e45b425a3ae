/**
 * A many-rank run at a glance (more than 64 ranks: the snapshot's `summary`): ranks by state, the quantiles
 * of each measure, the loss as a median inside the ranks' min–max band, the hosts, the outliers worth a look
 * and where the ranks wait. The ranks themselves are in the paged table (`paged.ts`).
 */
import { bandChart, cleanBand } from './chart';
import { details, el, isObject, token } from './dom';
import { clip, count, DASH, metric, num, rate, str } from './format';
import { IViewState, P, STATE_ORDER } from './model';
import { IGroup, IHostGroup, IOutlier, IQuantile, IRunError, IRunSnapshot, ISummary } from './types';
import { bytes, pct } from './usage';

/** Hosts beyond this many fold away. */
export const HOSTS_OPEN = 8;

/** The snapshot's summary, when it is a many-rank run's. */
export function summaryOf(snap: IRunSnapshot): ISummary | null {
  return isObject(snap.summary) ? (snap.summary as ISummary) : null;
}

function list<T>(value: unknown): T[] {
  return Array.isArray(value) ? (value.filter(isObject) as T[]) : [];
}

/** States in the summary's order, then any other. */
function ordered(counts: Record<string, unknown>): Array<[string, number]> {
  const keys = [...STATE_ORDER, ...Object.keys(counts).filter(k => !STATE_ORDER.includes(k))];
  return keys.map(k => [k, num(counts[k]) ?? 0] as [string, number]).filter(([, n]) => n > 0);
}

/** A chip per state, as the header draws them for a small run, and a bar of the shares. */
function countsLine(counts: Record<string, unknown>): HTMLElement {
  const box = el('div', `${P}-counts`);
  box.dataset.k = 'counts';
  const entries = ordered(counts);
  const total = entries.reduce((acc, [, n]) => acc + n, 0);
  const chips = el('div', `${P}-chips`);
  for (const [s, n] of entries) {
    const chip = el('span', `${P}-chip`);
    chip.dataset.state = s;
    chip.appendChild(el('span', `${P}-dot ${P}-state-${token(s)}`));
    chip.appendChild(document.createTextNode(`${count(n)} ${s}`));
    chips.appendChild(chip);
  }
  box.appendChild(chips);
  if (total > 0) {
    const bar = el('div', `${P}-stateBar`);
    for (const [s, n] of entries) {
      const part = el('span', `${P}-dot ${P}-state-${token(s)}`);
      part.style.width = `${((100 * n) / total).toFixed(2)}%`;
      part.title = `${count(n)} ${s}`;
      bar.appendChild(part);
    }
    box.appendChild(bar);
  }
  return box;
}

/** A value of measure `name`, as the rank table would show it. */
function measure(name: string, value: unknown): string {
  const n = num(value);
  if (n === null) {
    return DASH;
  }
  switch (name) {
    case 'step':
      return count(n);
    case 'rate':
      return rate(n);
    case 'cpu_pct':
    case 'gpu_util':
      return pct(n);
    case 'rss':
    case 'gpu_mem':
      return bytes(n);
    case 'input_wait':
      return pct(100 * n);
    default:
      return metric(n, true);
  }
}

const MEASURE_LABEL: Record<string, string> = {
  cpu_pct: 'CPU',
  rss: 'memory',
  gpu_util: 'GPU',
  gpu_mem: 'GPU memory',
  input_wait: 'input wait'
};

function quantileTable(quantiles: IQuantile[]): HTMLElement {
  const wrap = el('div', `${P}-panel ${P}-quantiles`);
  wrap.dataset.k = 'quantiles';
  wrap.appendChild(el('div', `${P}-panelTitle`, 'Over the ranks'));
  const table = el('table', `${P}-table ${P}-qTable`);
  const head = el('tr');
  for (const name of ['', 'min', '25%', 'median', '75%', 'max', 'ranks']) {
    head.appendChild(el('th', name ? `${P}-num` : '', name));
  }
  const thead = el('thead');
  thead.appendChild(head);
  table.appendChild(thead);
  const body = el('tbody');
  for (const q of quantiles) {
    const name = str(q.name);
    const row = el('tr');
    row.dataset.name = name;
    row.appendChild(el('th', `${P}-qName`, clip(MEASURE_LABEL[name] ?? name, 24)));
    const values = Array.isArray(q.q) ? q.q : [];
    for (let i = 0; i < 5; i++) {
      row.appendChild(el('td', `${P}-num`, measure(name, values[i])));
    }
    row.appendChild(el('td', `${P}-num`, count(q.n)));
    body.appendChild(row);
  }
  table.appendChild(body);
  wrap.appendChild(table);
  return wrap;
}

/** The loss over the run: the median inside the ranks' min–max band. */
function bandSection(summary: ISummary, world: number): HTMLElement | null {
  const band = cleanBand(summary.loss_band);
  if (!band.length) {
    return null;
  }
  const box = el('div', `${P}-panel ${P}-loss ${P}-band`);
  box.dataset.k = 'band';
  box.appendChild(el('div', `${P}-panelTitle`, 'Loss'));
  box.appendChild(bandChart(band));
  const legend = el('div', `${P}-legend`);
  const median = el('span', `${P}-legendItem`);
  median.appendChild(el('span', `${P}-swatch ${P}-swatchMedian`));
  median.appendChild(document.createTextNode('median'));
  const range = el('span', `${P}-legendItem`);
  range.appendChild(el('span', `${P}-swatch ${P}-swatchBand`));
  range.appendChild(document.createTextNode(`min to max of ${count(world)} ranks`));
  legend.append(median, range);
  box.appendChild(legend);
  return box;
}

function countsText(counts: unknown): string {
  const entries = ordered(isObject(counts) ? counts : {});
  return entries.map(([s, n]) => `${count(n)} ${s}`).join(' \u00b7 ') || DASH;
}

const HOST_COLUMNS: [string, string][] = [
  ['Host', ''],
  ['Ranks', 'num'],
  ['States', ''],
  ['Median step', 'num'],
  ['Median rate', 'num']
];

function hostHead(): HTMLElement {
  const head = el('tr');
  for (const [name, cls] of HOST_COLUMNS) {
    head.appendChild(el('th', cls ? `${P}-${cls}` : '', name));
  }
  const thead = el('thead');
  thead.appendChild(head);
  return thead;
}

/** One host's row: clicking it shows the host's ranks in the table. */
function hostRow(h: IHostGroup): HTMLElement {
  const row = el('tr', `${P}-hostRow`);
  const host = str(h.host);
  row.dataset.host = host;
  row.dataset.action = 'search';
  row.dataset.search = host;
  row.title = 'Show this host\u2019s ranks in the table';
  row.appendChild(el('td', `${P}-host`, clip(host, 40) || DASH));
  row.appendChild(el('td', `${P}-num`, count(h.ranks)));
  const states = el('td', `${P}-hostStates`, countsText(h.counts));
  if (isObject(h.counts) && (num(h.counts.failed) ?? 0) > 0) {
    states.classList.add(`${P}-lastError`);
  }
  row.appendChild(states);
  const step = num(h.step);
  row.appendChild(el('td', `${P}-num`, step === null ? DASH : metric(step)));
  row.appendChild(el('td', `${P}-num`, rate(h.rate)));
  return row;
}

/** The host table, in its scrolling wrapper. */
function hostWrap(hosts: IHostGroup[]): HTMLElement {
  const table = el('table', `${P}-table ${P}-hostTable`);
  table.appendChild(hostHead());
  const body = el('tbody');
  for (const h of hosts) {
    body.appendChild(hostRow(h));
  }
  table.appendChild(body);
  const wrap = el('div', `${P}-hostWrap`);
  wrap.appendChild(table);
  return wrap;
}

function hostsSection(hosts: IHostGroup[], state: IViewState): HTMLElement | null {
  if (!hosts.length) {
    return null;
  }
  const title = `${count(hosts.length)} host${hosts.length === 1 ? '' : 's'}`;
  if (hosts.length > HOSTS_OPEN) {
    const section = details('hosts', title, false, state, `${P}-hosts`);
    section.appendChild(hostWrap(hosts));
    return section;
  }
  const section = el('div', `${P}-hosts`);
  section.dataset.k = 'hosts';
  section.appendChild(el('div', `${P}-sectionTitle`, title));
  section.appendChild(hostWrap(hosts));
  return section;
}

/** A rank link: opens its details. */
export function rankLink(rank: number, text = String(rank)): HTMLElement {
  const link = el('button', `${P}-link ${P}-rankLink`, text);
  link.type = 'button';
  link.dataset.action = 'open-rank';
  link.dataset.rank = String(rank);
  link.title = `Show rank ${rank}`;
  return link;
}

const WHY_STATE: Record<string, string> = {
  failed: 'failed',
  paused: 'stopped',
  stalled: 'stopped',
  behind: 'starting',
  slowest: 'starting',
  'waiting on input': 'starting'
};

function outliersSection(outliers: IOutlier[], openRank: number | null): HTMLElement | null {
  if (!outliers.length) {
    return null;
  }
  const section = el('div', `${P}-outliers`);
  section.dataset.k = 'outliers';
  section.appendChild(el('div', `${P}-sectionTitle`, 'Worth a look'));
  const items = el('ul', `${P}-outlierList`);
  for (const o of outliers) {
    const rank = num(o.rank);
    if (rank === null) {
      continue;
    }
    const why = str(o.why);
    const item = el('li', `${P}-outlier`);
    item.dataset.rank = String(rank);
    item.dataset.why = why;
    item.dataset.action = 'open-rank';
    item.tabIndex = 0;
    item.title = `Show rank ${rank}`;
    item.classList.toggle(`${P}-picked`, rank === openRank);
    item.appendChild(el('span', `${P}-outlierRank`, `rank ${rank}`));
    const host = str(o.host);
    if (host) {
      item.appendChild(el('span', `${P}-host`, clip(host, 32)));
    }
    item.appendChild(el('span', `${P}-pill ${P}-state-${token(WHY_STATE[why] ?? 'pending')}`, why || '?'));
    const detail = str(o.detail);
    const text = el('span', `${P}-outlierDetail`, clip(detail, 200));
    if (detail.length > 200) {
      text.title = detail;
    }
    item.appendChild(text);
    items.appendChild(item);
  }
  section.appendChild(items);
  return section;
}

/** "1,019 ranks: RuntimeError: connection closed by peer — e.g. ranks 1, 2, 3" (clickable ranks). */
export function groupLine(g: IGroup, cls: string): HTMLElement {
  const item = el('li', cls);
  const n = num(g.ranks) ?? 0;
  item.appendChild(el('span', `${P}-groupCount`, `${count(n)} rank${n === 1 ? '' : 's'}:`));
  item.appendChild(el('span', `${P}-groupSummary`, ` ${clip(str(g.summary), 300)}`));
  const sample = (Array.isArray(g.sample) ? g.sample : []).map(num).filter((r): r is number => r !== null);
  if (sample.length) {
    item.appendChild(document.createTextNode(` \u2014 ${n > sample.length ? 'e.g. ' : ''}rank${sample.length === 1 ? '' : 's'} `));
    sample.slice(0, 8).forEach((r, i) => {
      if (i) {
        item.appendChild(document.createTextNode(', '));
      }
      item.appendChild(rankLink(r));
    });
  }
  return item;
}

function placesSection(places: IGroup[]): HTMLElement | null {
  if (!places.length) {
    return null;
  }
  const section = el('div', `${P}-places`);
  section.dataset.k = 'places';
  section.appendChild(el('div', `${P}-sectionTitle`, 'Where the ranks are'));
  const items = el('ul', `${P}-groupList`);
  for (const g of places) {
    items.appendChild(groupLine(g, `${P}-placeGroup`));
  }
  section.appendChild(items);
  return section;
}

/** The failure box's echoes of a many-rank run: the other ranks' failures grouped by what they say. */
export function echoesOf(error: IRunError): HTMLElement | null {
  const echoes = list<IGroup>(error.echoes);
  if (!echoes.length) {
    return null;
  }
  const n = echoes.reduce((acc, g) => acc + (num(g.ranks) ?? 0), 0);
  const box = el('div', `${P}-echoes`);
  box.appendChild(
    el('div', `${P}-echoesTitle`, `${count(n)} other rank${n === 1 ? '' : 's'} failed too (most likely as a consequence):`)
  );
  const items = el('ul', `${P}-groupList`);
  for (const g of echoes) {
    items.appendChild(groupLine(g, `${P}-echo`));
  }
  box.appendChild(items);
  return box;
}

/** Counts, quantiles and the loss band, outliers, places and hosts of a many-rank run. */
export function overview(summary: ISummary, state: IViewState, world: number): HTMLElement {
  const box = el('div', `${P}-overview`);
  box.dataset.k = 'overview';
  box.appendChild(countsLine(isObject(summary.counts) ? summary.counts : {}));
  const quantiles = list<IQuantile>(summary.quantiles);
  const band = bandSection(summary, world);
  if (quantiles.length || band) {
    const row = el('div', `${P}-overviewRow`);
    row.dataset.k = 'measures';
    if (quantiles.length) {
      row.appendChild(quantileTable(quantiles));
    }
    if (band) {
      row.appendChild(band);
    }
    box.appendChild(row);
  }
  for (const section of [
    outliersSection(list<IOutlier>(summary.outliers), state.openRank),
    placesSection(list<IGroup>(summary.places)),
    hostsSection(list<IHostGroup>(summary.hosts), state)
  ]) {
    if (section) {
      box.appendChild(section);
    }
  }
  return box;
}
