/**
 * The logs section: a tab per rank, the chosen rank's tail, "show all", and where every line is kept.
 */
import { details, el, rankId, token } from './dom';
import { count, num, str } from './format';
import { IViewState, LOG_PREVIEW_LINES, P } from './model';
import { IRankSnapshot } from './types';

function logInfo(r: IRankSnapshot | undefined, id: number, tail: unknown[], state: IViewState): HTMLElement {
  const total = num(r?.log_lines) ?? tail.length;
  const info = el('div', `${P}-logInfo`);
  const host = str(r?.host);
  const shown =
    total > tail.length
      ? `last ${count(tail.length)} of ${count(total)} lines`
      : `${count(total)} line${total === 1 ? '' : 's'}`;
  info.appendChild(el('span', '', `rank ${id}${host ? ` \u00b7 ${host}` : ''} \u00b7 ${shown}`));
  if (tail.length > LOG_PREVIEW_LINES) {
    const all = el('button', `${P}-link`, state.logAll ? 'show less' : `show all ${count(tail.length)}`);
    all.type = 'button';
    all.dataset.action = 'log-all';
    info.appendChild(all);
  }
  if (total > tail.length) {
    const where = el('span', `${P}-logWhere`);
    where.appendChild(document.createTextNode('every line, in the kernel: '));
    where.appendChild(el('code', '', `jupyter_torchdist.last_run().logs[${id}]`));
    info.appendChild(where);
  }
  const dropped = num(r?.log_dropped) ?? 0;
  if (dropped > 0) {
    info.appendChild(el('span', `${P}-logDropped`, `${count(dropped)} lines past the budget were dropped`));
  }
  return info;
}

export function logBody(
  r: IRankSnapshot | undefined,
  id: number,
  state: IViewState,
  live: boolean
): HTMLElement {
  const box = el('div', `${P}-logBody`);
  const tail = r && Array.isArray(r.log_tail) ? r.log_tail : [];
  box.appendChild(logInfo(r, id, tail, state));
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

export function logsSection(
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
