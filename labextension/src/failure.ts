/**
 * The failure box (root cause first, the other ranks' echoes folded away), the value and the loss panel.
 */
import { cleanPoints, ISeries, lossChart, PALETTE } from './chart';
import { details, el, isObject, rankId } from './dom';
import { num, str } from './format';
import { IViewState, KIND_LABEL, P } from './model';
import { echoesOf } from './summary';
import { IRankSnapshot, IRunError } from './types';

function whereLine(error: IRunError): HTMLElement {
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
  return where;
}

function secondaries(error: IRunError, state: IViewState): HTMLElement | null {
  const secondary = Array.isArray(error.secondary) ? error.secondary.filter(isObject) : [];
  const n = secondary.length;
  if (!n) {
    return null;
  }
  const title = `${n} other rank${n === 1 ? '' : 's'} failed too (most likely as a consequence)`;
  const more = details('secondary', title, false, state, `${P}-secondary`);
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
  return more;
}

/** The root cause: where, what, its traceback; the other ranks' failures folded away below. */
export function failure(error: IRunError, state: IViewState, many = false): HTMLElement {
  const box = el('div', `${P}-error`);
  box.dataset.k = 'error';
  box.appendChild(whereLine(error));
  box.appendChild(el('div', `${P}-errorSummary`, str(error.summary) || 'failed'));
  const tb = str(error.traceback).replace(/\s+$/, '');
  if (tb) {
    box.appendChild(el('pre', `${P}-traceback`, tb));
  }
  // A many-rank run's other failures come grouped by what they say, not one by one.
  const more = (many ? echoesOf(error) : null) ?? secondaries(error, state);
  if (more) {
    box.appendChild(more);
  }
  return box;
}

export function valueSection(repr: string): HTMLElement {
  const box = el('div', `${P}-panel ${P}-value`);
  box.dataset.k = 'value';
  box.appendChild(el('div', `${P}-panelTitle`, 'Value (rank 0)'));
  box.appendChild(el('pre', `${P}-valuePre`, repr));
  return box;
}

export function chartSection(ranks: IRankSnapshot[]): HTMLElement | null {
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
