/**
 * The head of a sweep's comparison view (`compare.ts`): its status, title and counts, and for a search what it
 * searches and judges by, how many members have ended of those planned, and the best one; with the member state
 * text and the best-member test the table shares, so the view and its rows say the same thing.
 */
import { el, isObject, token } from './dom';
import { duration, metric, num, str } from './format';
import { P, STATE_ORDER, STATUS_LABEL } from './model';
import { ISweepRun, ISweepSnapshot } from './types';

export const BEST_MARK = '\u2605';
/** Members that will not move again (the "k" of "k of N members ended"). */
const ENDED = ['done', 'pruned', 'failed', 'stopped'];

/** `pruned @ 9` (a pruned member says how far it got), `done (past)` for a member of an earlier kernel. */
export function stateText(r: ISweepRun): string {
  const state = str(r.state) || 'queued';
  const at = num(r.pruned_at);
  const text = state === 'pruned' && at !== null ? `${state} @ ${at}` : state;
  return r.past === true ? `${text} (past)` : text;
}

export function isBest(snap: ISweepSnapshot, r: ISweepRun): boolean {
  const best = num(snap.best_id);
  return best !== null && num(r.id) === best;
}

/** What kind of sweep: `random search · loss (min) · early stop: asha · 7 of 20 members ended`; '' when older. */
function aboutOf(snap: ISweepSnapshot, rows: ISweepRun[]): string {
  const parts: string[] = [];
  if (str(snap.search)) {
    parts.push(`${str(snap.search)} search`);
  }
  if (str(snap.metric)) {
    parts.push(str(snap.mode) ? `${str(snap.metric)} (${str(snap.mode)})` : str(snap.metric));
  }
  const stop = str(snap.early_stop);
  if (stop) {
    parts.push(stop === 'none' ? 'no early stop' : `early stop: ${stop}`);
  }
  const trials = num(snap.trials);
  if (trials) {
    parts.push(`${rows.filter(r => ENDED.includes(str(r.state))).length} of ${trials} members ended`);
  }
  const best = rows.find(r => isBest(snap, r));
  if (best) {
    parts.push(`best: ${BEST_MARK} run ${str(best.id)}, ${str(snap.metric) || 'metric'} ${metric(best.metric_best)}`);
  }
  return parts.join(' \u00b7 ');
}

export function headerOf(snap: ISweepSnapshot, rows: ISweepRun[]): HTMLElement {
  const head = el('div', `${P}-header`);
  head.dataset.k = 'header';
  const top = el('div', `${P}-headerTop`);
  const status = str(snap.status) || 'running';
  top.appendChild(el('span', `${P}-badge ${P}-status-${token(status)}`, STATUS_LABEL[status] ?? status));
  top.appendChild(el('span', `${P}-title`, str(snap.title) || 'sweep'));
  const at = num(snap.concurrent);
  const parts = [`${rows.length} runs`, ...(at ? [`${at} at once`] : []), duration(snap.elapsed_s)];
  top.appendChild(el('span', `${P}-meta`, parts.join(' \u00b7 ')));
  head.appendChild(top);
  const about = aboutOf(snap, rows);
  if (about) {
    head.appendChild(el('div', `${P}-sweepAbout`, about));
  }
  const chips = el('div', `${P}-chips`);
  const counts: Record<string, unknown> = isObject(snap.counts) ? snap.counts : {};
  const order = [...STATE_ORDER.filter(k => k in counts), ...Object.keys(counts).filter(k => !STATE_ORDER.includes(k))];
  for (const state of order) {
    const n = counts[state];
    if (num(n)) {
      const chip = el('span', `${P}-chip`);
      chip.append(el('span', `${P}-dot ${P}-state-${token(state)}`), document.createTextNode(`${n} ${state}`));
      chips.appendChild(chip);
    }
  }
  head.appendChild(chips);
  return head;
}
