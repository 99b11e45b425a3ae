/**
 * The runs panel's content, built from the API's list (`runs_api.ts`) as a fresh tree each time and patched into
 * the page (`morph.ts`), so buttons, hover and scroll survive the updates. Runs are grouped by notebook (the
 * groups with runs going first); a sweep is one row that opens to its members. Text only through `textContent`.
 *
 * Actions are `data-action` attributes, handled by the panel's one click listener (`runs_panel.ts`):
 * `notebook` (open the notebook at the run's cell), `report`, `stop`, `toggle` (a sweep's members).
 */
import { el } from './dom';
import { DASH, clip, count, duration, metric, rate } from './format';
import { IRunEntry, isGoing } from './runs_api';

export const R = 'jp-TorchDist-runs';

/** What the user changed in the panel: open sweeps, stops asked and not yet seen in the list. */
export interface IRunsState {
  open: Set<string>;
  stopping: Map<string, string>; // id -> what the stop said ("asked", or the error)
  now: number; // seconds since the epoch
}

function progressText(e: IRunEntry): string {
  if (e.kind === 'sweep') {
    return `${count(e.step)}/${e.total === null ? '?' : count(e.total)} members ended`;
  }
  if (e.step === null) {
    return e.state === 'queued' ? 'queued' : DASH;
  }
  return e.total ? `${count(e.step)}/${count(e.total)}` : `step ${count(e.step)}`;
}

function fraction(e: IRunEntry): number | null {
  if (e.step === null || !e.total) {
    return null;
  }
  return Math.max(0, Math.min(1, e.step / e.total));
}

function elapsed(e: IRunEntry, now: number): string {
  const from = e.started ?? e.submitted;
  return duration((e.ended ?? now) - from);
}

function meta(e: IRunEntry, now: number): string {
  const parts = [progressText(e)];
  if (e.kind === 'run' && e.rate !== null && isGoing(e)) {
    parts.push(rate(e.rate));
  }
  if (e.metric) {
    parts.push(`${e.metric.name} ${metric(e.metric.value)}`);
  }
  if (e.where) {
    parts.push(e.where);
  }
  parts.push(`${e.ranks} rank${e.ranks === 1 ? '' : 's'}${e.host_count > 1 ? ` on ${e.host_count} hosts` : ''}`);
  parts.push(elapsed(e, now));
  return parts.join(' \u00b7 ');
}

function button(action: string, label: string, title: string, disabled = false): HTMLButtonElement {
  const b = el('button', `${R}-action`, label);
  b.type = 'button';
  b.dataset.action = action;
  b.title = title;
  b.disabled = disabled;
  return b;
}

function links(e: IRunEntry): HTMLElement[] {
  return e.links.map(link => {
    if (link.url && /^https?:\/\//i.test(link.url)) {
      const a = el('a', `${R}-link`, `${link.label} \u2197`);
      a.href = link.url;
      a.target = '_blank';
      a.rel = 'noopener noreferrer';
      a.dataset.kind = link.kind;
      return a;
    }
    const span = el('span', `${R}-link`, link.label);
    span.title = link.path ?? '';
    span.dataset.kind = link.kind;
    return span;
  });
}

function actions(e: IRunEntry, state: IRunsState): HTMLElement {
  const box = el('span', `${R}-actions`);
  box.appendChild(button('notebook', 'Cell', e.notebook ? `Open ${e.notebook} at this run's cell` : 'Not from a notebook',
    !e.notebook));
  box.appendChild(button('report', 'Report', e.report || isGoing(e) ? "This run's report, in a tab" : 'No report yet',
    !e.report && !isGoing(e)));
  if (e.detached) {
    box.appendChild(button('attach', 'Attach', 'A new cell in the notebook you are in: %distribute_attach ' + e.id +
      ' (its live view, its handle)'));
  }
  links(e).forEach(link => box.appendChild(link));
  const asked = state.stopping.get(e.id);
  const stop = button('stop', asked === 'asked' || e.state === 'stopping' ? 'Stopping\u2026' : 'Stop',
    asked && asked !== 'asked' ? asked : e.kind === 'sweep' ? 'Stop every member of this sweep' : 'Stop this run only',
    !isGoing(e) || asked === 'asked' || e.state === 'stopping');
  stop.classList.add(`${R}-stop`);
  box.appendChild(stop);
  return box;
}

/** What tells a run from its neighbours: a member's parameters, else its cell's options (every cell says
 * `%%distribute`). */
function title(e: IRunEntry, member: boolean): HTMLElement {
  const options = e.cell.replace(/^%%?distribute\s*/, '');
  const text = member && e.params ? e.params : options || e.cell || `run ${e.number}`;
  const span = el('span', `${R}-title`, clip(text, 80));
  span.title = `${e.id}: ${e.cell}${e.params ? ` [${e.params}]` : ''}`;
  return span;
}

function head(e: IRunEntry, state: IRunsState, member: boolean): HTMLElement {
  const line = el('div', `${R}-head`);
  if (e.kind === 'sweep') {
    const open = state.open.has(e.id);
    const toggle = button('toggle', open ? '\u25be' : '\u25b8', open ? 'Hide the members' : 'Show the members');
    toggle.classList.add(`${R}-toggle`);
    line.appendChild(toggle);
  }
  const badge = el('span', `${R}-state`, e.kind === 'sweep' ? `sweep ${e.state}` : e.state);
  badge.dataset.state = e.state;
  line.appendChild(badge);
  if (e.detached) {
    const alone = el('span', `${R}-detached`, 'no kernel');
    alone.title = 'A detached run (--detach): it goes on without a kernel; Attach shows it in a notebook';
    line.appendChild(alone);
  }
  line.appendChild(title(e, member));
  const id = el('span', `${R}-id`, e.kind === 'sweep' ? `#s${e.number} ${e.id}` : `#${e.number} ${e.id}`);
  id.title = "its kernel's number, then its durable id (`jupyter-torchdist stop` takes it)";
  line.appendChild(id);
  return line;
}

function bar(e: IRunEntry): HTMLElement {
  const outer = el('div', `${R}-bar`);
  const fill = el('div', `${R}-barFill`);
  const f = fraction(e);
  fill.style.width = f === null ? (isGoing(e) ? '0%' : '100%') : `${(f * 100).toFixed(1)}%`;
  fill.dataset.state = e.state;
  outer.appendChild(fill);
  return outer;
}

/** One run's (or sweep's) row. */
export function runRow(e: IRunEntry, state: IRunsState, member = false): HTMLElement {
  const row = el('div', `${R}-row`);
  row.dataset.k = `${e.kind}:${e.id}`;
  row.dataset.id = e.id;
  row.dataset.state = e.state;
  row.dataset.kind = e.kind;
  row.appendChild(head(e, state, member));
  row.appendChild(bar(e));
  row.appendChild(el('div', `${R}-meta`, meta(e, state.now)));
  const said = state.stopping.get(e.id);
  const outcome = said && said !== 'asked' ? said : isGoing(e) ? null : e.outcome;
  if (outcome) {
    row.appendChild(el('div', `${R}-outcome`, clip(outcome, 200)));
  }
  row.appendChild(actions(e, state));
  return row;
}

function order(a: IRunEntry, b: IRunEntry): number {
  const going = Number(isGoing(b)) - Number(isGoing(a));
  return going || b.submitted - a.submitted;
}

function group(notebook: string, entries: IRunEntry[], all: IRunEntry[], state: IRunsState): HTMLElement {
  const box = el('div', `${R}-group`);
  box.dataset.k = `nb:${notebook}`;
  const name = notebook.split('/').pop() || notebook;
  const headLine = el('div', `${R}-groupHead`);
  headLine.appendChild(el('span', `${R}-groupName`, name));
  headLine.appendChild(el('span', `${R}-groupCount`, `${entries.filter(isGoing).length} going`));
  headLine.title = notebook;
  box.appendChild(headLine);
  for (const e of entries.sort(order)) {
    box.appendChild(runRow(e, state));
    if (e.kind === 'sweep' && state.open.has(e.id)) {
      const members = el('div', `${R}-members`);
      members.dataset.k = `members:${e.id}`;
      all.filter(m => m.sweep === e.id).sort((a, b) => a.number - b.number)
        .forEach(m => members.appendChild(runRow(m, state, true)));
      box.appendChild(members);
    }
  }
  return box;
}

/** The whole list: a group per notebook, those with runs going first. */
export function renderRuns(entries: IRunEntry[], state: IRunsState): HTMLElement {
  const root = el('div', `${R}-list`);
  const groups = new Map<string, IRunEntry[]>();
  for (const e of entries.filter(e => !e.sweep)) {
    const key = e.notebook ?? `kernel ${e.kernel_id.slice(0, 8)} (no notebook)`;
    groups.set(key, [...(groups.get(key) ?? []), e]);
  }
  const rank = (list: IRunEntry[]): number[] => [-Number(list.some(isGoing)), -Math.max(...list.map(e => e.submitted))];
  const sorted = [...groups.entries()].sort((a, b) => {
    const [x, y] = [rank(a[1]), rank(b[1])];
    return x[0] - y[0] || x[1] - y[1];
  });
  sorted.forEach(([notebook, list]) => root.appendChild(group(notebook, list, entries, state)));
  if (!sorted.length) {
    root.appendChild(el('div', `${R}-empty`,
      'No runs yet. A %%distribute cell in any notebook of this server shows here while it trains.'));
  }
  return root;
}
