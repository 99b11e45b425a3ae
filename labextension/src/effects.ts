/**
 * A sweep's parameter effect in the comparison view (`jupyter_torchdist/views/effects.py` draws the same for the
 * saved report): per parameter, each finished member's metric against that parameter's value, members stopped
 * early hollow and the best one orange, and the best metric so far over the members. Drawn with `chart.ts`'s scale,
 * axis and curve so every chart of the view reads alike. Pure; snapshot text goes in as textContent only.
 */
import { chartRoot, cleanPoints, curve, IScale, label, PALETTE, scaleFor, svg } from './chart';
import { el, isObject } from './dom';
import { metric, num, str } from './format';
import { P } from './model';
import { ISweepRun, ISweepSnapshot } from './types';

/** Members whose best metric is a result (a failed one's is not). */
const PLOTTED = ['done', 'stopped_early'];
const MAX_PARAMS = 12;
const SIZE: [number, number] = [260, 150];
const BOTTOM = 32; // room under the plot for the tick labels and the axis name
const MAX_CATEGORY_TICKS = 5; // more categories than this: only the first and last are labelled
const MODE_NOTE: Record<string, string> = { min: ' (lower is better)', max: ' (higher is better)' };

/** Where each member sits along one parameter, and how the axis is labelled. */
interface IAxis {
  xs: number[];
  range: [number, number];
  ticks: Array<[number, string]>;
  title: string;
}

function paramsOf(r: ISweepRun): Record<string, unknown> {
  return isObject(r.params) ? r.params : {};
}

/** The scale the sweep declared, else linear for numbers and category for anything else. */
function kindOf(declared: unknown, values: unknown[]): string {
  const numeric = values.every(v => num(v) !== null);
  if ((declared === 'log' || declared === 'linear') && numeric) {
    return declared === 'log' && values.every(v => (v as number) > 0) ? 'log' : 'linear';
  }
  return numeric && declared !== 'category' ? 'linear' : 'category';
}

/** Log10 of the value on a log scale, the value on a linear one, categories spread evenly as first seen. */
function axisOf(name: string, declared: unknown, values: unknown[]): IAxis {
  const kind = kindOf(declared, values);
  if (kind === 'category') {
    const cats = [...new Set(values.map(str))];
    const shown = cats.length <= MAX_CATEGORY_TICKS ? cats : [cats[0], cats[cats.length - 1]];
    return {
      xs: values.map(v => cats.indexOf(str(v))),
      range: [-0.5, cats.length - 0.5],
      ticks: shown.map(c => [cats.indexOf(c), c.slice(0, 12)]),
      title: name
    };
  }
  const nums = values as number[];
  const xs = nums.map(v => (kind === 'log' ? Math.log10(v) : v));
  const [lo, hi] = [Math.min(...xs), Math.max(...xs)];
  const pad = (hi - lo) * 0.08 || 0.5;
  const ticks: Array<[number, string]> = [[lo, metric(Math.min(...nums))]];
  if (hi > lo) {
    ticks.push([hi, metric(Math.max(...nums))]);
  }
  return { xs, range: [lo - pad, hi + pad], ticks, title: kind === 'log' ? `${name} (log)` : name };
}

/** A member's point: filled when it finished, hollow when stopped early, larger and orange for the best. */
function dot(r: ISweepRun, x: number, y: number, best: boolean, metricName: string, s: IScale): SVGElement {
  const colour = best ? PALETTE[1] : PALETTE[0];
  const early = str(r.state) === 'stopped_early';
  const paint: Record<string, string | number> = early
    ? { fill: 'none', stroke: colour, 'stroke-width': 1.4 }
    : { fill: colour, 'fill-opacity': 0.85 };
  const node = svg('circle', { cx: s.sx(x), cy: s.sy(y), r: best ? 4.5 : 3, ...paint });
  node.dataset.state = str(r.state);
  const at = num(r.stopped_early_at);
  const title = svg('title', {});
  title.textContent =
    `run ${str(r.id)}: ${str(r.label)}, ${metricName} ${metric(y)}` + (at !== null ? ` (stopped early @ ${at})` : '');
  node.appendChild(title);
  return node;
}

/** One parameter's chart: the members' metric (y) against its value (x). */
function scatter(name: string, snap: ISweepSnapshot, members: Array<[ISweepRun, number]>): HTMLElement {
  const metricName = str(snap.metric) || 'metric';
  const scales = isObject(snap.scales) ? snap.scales : {};
  const axis = axisOf(name, scales[name], members.map(([r]) => paramsOf(r)[name]));
  const points = members.map(([, y], i): [number, number] => [axis.xs[i], y]);
  const s = scaleFor([{ rank: 0, points }], { size: SIZE, xRange: axis.range, bottom: BOTTOM });
  const root = chartRoot(`${P}-chart ${P}-scatter`, `${metricName} against ${name}`, s, null);
  for (const [x, text] of axis.ticks) {
    root.appendChild(label(s.sx(x), s.h - 18, text, 'middle'));
  }
  root.appendChild(label(s.w / 2, s.h - 3, axis.title, 'middle'));
  const bestId = num(snap.best_id);
  members.forEach(([r, y], i) => {
    root.appendChild(dot(r, axis.xs[i], y, bestId !== null && num(r.id) === bestId, metricName, s));
  });
  const box = el('div', `${P}-effect`);
  box.dataset.k = `effect-${name}`;
  box.appendChild(root);
  return box;
}

/** The best metric among the first k members to finish, over k. */
function bestSoFar(snap: ISweepSnapshot): HTMLElement | null {
  const points = cleanPoints(snap.best_so_far);
  if (!points.length) {
    return null;
  }
  const name = `best ${str(snap.metric) || 'metric'} so far`;
  const s = scaleFor([{ rank: 0, points }]);
  const root = chartRoot(`${P}-chart`, name, s, 'member');
  root.appendChild(curve({ rank: 0, points, label: name }, PALETTE[0], false, s));
  const box = el('div', `${P}-effect ${P}-bestSoFar`);
  box.dataset.k = 'best-so-far';
  box.append(el('div', `${P}-effectCaption`, `${name}, over the members as they finish`), root);
  return box;
}

/** The finished and stopped-early members with a metric: [row, its best metric]. */
function plotted(rows: ISweepRun[]): Array<[ISweepRun, number]> {
  const out: Array<[ISweepRun, number]> = [];
  for (const r of rows) {
    const y = num(r.metric_best);
    if (PLOTTED.includes(str(r.state)) && y !== null && isObject(r.params)) {
      out.push([r, y]);
    }
  }
  return out;
}

/** The "parameter effect" panel, or null when nothing can be plotted (a snapshot from before searches). */
export function effectsPanel(snap: ISweepSnapshot, rows: ISweepRun[]): HTMLElement | null {
  const members = plotted(rows);
  const names = (Array.isArray(snap.names) ? snap.names.map(str) : []).slice(0, MAX_PARAMS);
  const charts: HTMLElement[] = [];
  for (const name of names) {
    const own = members.filter(([r]) => name in paramsOf(r));
    if (own.length) {
      charts.push(scatter(name, snap, own));
    }
  }
  const best = bestSoFar(snap);
  if (best) {
    charts.push(best);
  }
  if (!charts.length) {
    return null;
  }
  const metricName = str(snap.metric) || 'metric';
  const mode = MODE_NOTE[str(snap.mode)] ?? '';
  const box = el('div', `${P}-panel ${P}-effects`);
  box.dataset.k = 'effects';
  box.appendChild(el('div', `${P}-panelTitle`, 'parameter effect'));
  box.appendChild(
    el('div', `${P}-effectCaption`, `best ${metricName} of each finished member${mode}; hollow: stopped early; orange: the best`)
  );
  const wrap = el('div', `${P}-effectCharts`);
  charts.forEach(c => wrap.appendChild(c));
  box.appendChild(wrap);
  return box;
}
