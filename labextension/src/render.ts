/**
 * Build the DOM of a run report (saved, or live while the run goes on) from a snapshot.
 *
 * Pure: a snapshot and the user's view state in, a detached element out.
 * `view.ts` patches it into the page. All text goes through `textContent`
 * or `setAttribute`: nothing from the snapshot is ever parsed as HTML, so
 * the renderer is safe for untrusted notebooks. Interactive elements carry
 * `data-action` attributes; the view handles their events by delegation.
 */
import { el, isObject, rankId } from './dom';
import { chartSection, failure, valueSection } from './failure';
import { num, str } from './format';
import { header } from './header';
import { logsSection } from './logs';
import { ILiveOptions, IViewState, P } from './model';
import { profileSection } from './profile';
import { stacksSection } from './stacks';
import { fullRows, pagedTable, rankDetail, tableRows } from './paged';
import { overview, summaryOf } from './summary';
import { rankTable } from './table';
import { IRankSnapshot, IRunError, IRunSnapshot, ISummary, ITable } from './types';

export { emptyState, IN_FLIGHT, LOG_PREVIEW_LINES } from './model';
export type { ILiveOptions, IViewState, StopState } from './model';

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

/** The value and the loss curves side by side, when there is either. */
function panelRow(snap: IRunSnapshot, ranks: IRankSnapshot[]): HTMLElement | null {
  const value = snap.value_repr;
  const chart = chartSection(ranks);
  if ((value === null || value === undefined) && !chart) {
    return null;
  }
  const row = el('div', `${P}-panels`);
  row.dataset.k = 'panels';
  if (value !== null && value !== undefined) {
    row.appendChild(valueSection(str(value)));
  }
  if (chart) {
    row.appendChild(chart);
  }
  return row;
}

/** The table a many-rank run is drawn from: the live view's own (synced apart) when it has one, else the snapshot's. */
function tableOf(snap: IRunSnapshot, live: ILiveOptions | null): ITable | null {
  const own = live && isObject(live.table) ? (live.table as ITable) : null;
  if (own && Array.isArray(own.rows) && own.rows.length) {
    return own;
  }
  return isObject(snap.table) ? (snap.table as ITable) : null;
}

/**
 * A many-rank run (`summary`): the overview, the loss band, a paged table of every rank, and the opened
 * rank's details, in place of the per-rank table, loss curves and logs.
 */
function manyRanks(
  report: HTMLElement,
  snap: IRunSnapshot,
  summary: ISummary,
  ranks: IRankSnapshot[],
  error: IRunError | null,
  state: IViewState,
  live: ILiveOptions | null
): void {
  report.appendChild(overview(summary, state, num(snap.world_size) ?? 0));
  const value = snap.value_repr;
  if (value !== null && value !== undefined) {
    const row = el('div', `${P}-panels`);
    row.dataset.k = 'panels';
    row.appendChild(valueSection(str(value)));
    report.appendChild(row);
  }
  const table = tableOf(snap, live);
  const full = fullRows(ranks);
  const rootRank = error ? num(error.rank) : null;
  report.appendChild(pagedTable(table, new Set(full.keys()), rootRank, state));
  const open = state.openRank;
  if (open !== null) {
    const brief = full.has(open) ? null : (tableRows(table).find(r => r.rank === open) ?? null);
    report.appendChild(rankDetail(open, full.get(open) ?? null, brief, error, state, live));
  }
}

/**
 * A few-rank run: the panels, then the selected rank's stacks, the per-rank table and logs
 * (or a note that no rank reported).
 */
function fewRanks(
  report: HTMLElement,
  snap: IRunSnapshot,
  ranks: IRankSnapshot[],
  error: IRunError | null,
  state: IViewState,
  live: ILiveOptions | null
): void {
  const panels = panelRow(snap, ranks);
  if (panels) {
    report.appendChild(panels);
  }

  const selected = selectedRank(snap, state);
  if (selected === null) {
    const none = el('div', `${P}-muted`, 'No ranks reported.');
    none.dataset.k = 'none';
    report.appendChild(none);
    return;
  }
  const stacks = stacksSection(snap, ranks, state, live !== null);
  if (stacks) {
    report.appendChild(stacks);
  }
  const rootRank = error ? num(error.rank) : null;
  const logsOpen = state.details.logs ?? error !== null;
  report.appendChild(rankTable(ranks, rootRank, logsOpen ? selected : null, live));
  report.appendChild(logsSection(ranks, selected, error !== null, state, live !== null));
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
  const summary = summaryOf(snap);
  if (error) {
    report.appendChild(failure(error, state, summary !== null));
  }
  const profile = profileSection(snap, state);
  if (profile) {
    report.appendChild(profile);
  }
  if (summary) {
    manyRanks(report, snap, summary, ranks, error, state, live);
  } else {
    fewRanks(report, snap, ranks, error, state, live);
  }
  return report;
}
