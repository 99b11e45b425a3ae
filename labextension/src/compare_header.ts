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
const ENDED = ['done', 'stopped_early', 'failed', 'stopped'];
/** What a saved report of an earlier release called a member its early-stopping rule stopped. */
const EARLIER: Record<string, string> = { pruned: 'stopped_early' };

/** A state as the view says it: `stopped_early` reads `stopped early`. */
export function stateWords(state: string): string {
  return state.replace(/_/g, ' ');
}

/** `stopped early @ 9` (a member its rule stopped says how far it got), `done (past)` for an earlier kernel's. */
export function stateText(r: ISweepRun): string {
  const state = str(r.state) || 'queued';
  const at = num(r.stopped_early_at);
  const text = state === 'stopped_early' && at !== null ? `${stateWords(state)} @ ${at}` : stateWords(state);
  return r.past === true ? `${text} (past)` : text;
}

/** A snapshot in today's words: an earlier release's saved report said `pruned` and `pruned_at`. */
export function inTodaysWords(snap: ISweepSnapshot): ISweepSnapshot {
  const rename = (state: string): string => EARLIER[state] ?? state;
  const runs = Array.isArray(snap.runs)
    ? snap.runs.map((r: ISweepRun): ISweepRun => {
        if (!isObject(r)) {
          return r;
        }
        const at = num(r.stopped_early_at) ?? num((r as Record<string, unknown>).pruned_at);
        const state = typeof r.state === 'string' ? rename(r.state) : undefined;
        return { ...r, state, stopped_early_at: at };
      })
    : snap.runs;
  const counts = isObject(snap.counts)
    ? Object.fromEntries(Object.entries(snap.counts).map(([k, n]) => [rename(k), n]))
    : snap.counts;
  return { ...snap, runs, counts };
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
      chip.append(
        el('span', `${P}-dot ${P}-state-${token(state)}`),
        document.createTextNode(`${n} ${stateWords(state)}`)
      );
      chips.appendChild(chip);
    }
  }
  head.appendChild(chips);
  return head;
}
