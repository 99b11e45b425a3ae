/**
 * Small inline SVG charts: the loss per rank, and the parts a sweep's parameter-effect charts (`effects.ts`)
 * are drawn with (one scale, one axis, one curve). No chart library.
 */
const SVG_NS = 'http://www.w3.org/2000/svg';

/** Categorical colours, readable on light and dark themes. */
export const PALETTE = [
  '#4c78a8',
  '#f58518',
  '#54a24b',
  '#e45756',
  '#72b7b2',
  '#b279a2',
  '#eeca3b',
  '#9d755d'
];

/** One rank's loss curve (or one run's, in a sweep's comparison view: `label` names it). */
export interface ISeries {
  rank: number;
  points: Array<[number, number]>;
  label?: string;
}

/** The colour `lossChart` draws series `i` of `series` in (legends use it too). */
export function colourOf(series: ISeries[], i: number): string {
  const many = series.length > PALETTE.length;
  return PALETTE[(many ? series[i].rank : i) % PALETTE.length];
}

/** An SVG element with its attributes (values set as attributes, never parsed). */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    node.setAttribute(key, String(value));
  }
  return node;
}

/** An axis label. */
export function label(
  x: number,
  y: number,
  text: string,
  anchor: 'start' | 'middle' | 'end'
): SVGTextElement {
  const node = svg('text', {
    x,
    y,
    'text-anchor': anchor,
    class: 'jp-TorchDist-chartLabel'
  });
  node.textContent = text;
  return node;
}

/**
 * Round axis bounds and a step of 1, 2 or 5 times a power of ten, giving
 * about `target` intervals that cover [lo, hi].
 */
export function niceTicks(
  lo: number,
  hi: number,
  target = 4
): { lo: number; hi: number; step: number; decimals: number } {
  if (hi === lo) {
    const pad = Math.abs(lo) * 0.1 || 0.5;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / target;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const unit = raw / power;
  const step = (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  return {
    lo: Math.floor(lo / step + 1e-9) * step,
    hi: Math.ceil(hi / step - 1e-9) * step,
    step,
    decimals: Math.min(decimals, 8)
  };
}

/** Keep finite [x, y] pairs only. */
export function cleanPoints(raw: unknown): Array<[number, number]> {
  if (!Array.isArray(raw)) {
    return [];
  }
  const out: Array<[number, number]> = [];
  for (const p of raw) {
    if (
      Array.isArray(p) &&
      typeof p[0] === 'number' &&
      typeof p[1] === 'number' &&
      Number.isFinite(p[0]) &&
      Number.isFinite(p[1])
    ) {
      out.push([p[0], p[1]]);
    }
  }
  return out;
}

const W = 440;
const H = 170;
const LEFT = 50;
const RIGHT = 12;
const TOP = 10;
const BOTTOM = 24;

/** Data bounds to chart coordinates in a `w` by `h` box; the y range rounded to nice ticks. */
export interface IScale {
  x0: number;
  x1: number;
  w: number;
  h: number;
  ticks: ReturnType<typeof niceTicks>;
  sx: (x: number) => number;
  sy: (y: number) => number;
}

/** How a chart other than the loss chart is laid out: its size, its x range (else the data's), its bottom margin. */
export interface IFrame {
  size?: [number, number];
  xRange?: [number, number];
  bottom?: number;
}

export function scaleFor(series: ISeries[], frame: IFrame = {}): IScale {
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const s of series) {
    for (const [x, y] of s.points) {
      [x0, x1, y0, y1] = [Math.min(x0, x), Math.max(x1, x), Math.min(y0, y), Math.max(y1, y)];
    }
  }
  [x0, x1] = frame.xRange ?? [x0, x1];
  if (x1 === x0) {
    x0 -= 0.5;
    x1 += 0.5;
  }
  const [w, h] = frame.size ?? [W, H];
  const bottom = frame.bottom ?? BOTTOM;
  const ticks = niceTicks(y0, y1);
  const sx = (x: number): number => LEFT + ((x - x0) / (x1 - x0)) * (w - LEFT - RIGHT);
  const sy = (y: number): number => TOP + (1 - (y - ticks.lo) / (ticks.hi - ticks.lo)) * (h - TOP - bottom);
  return { x0, x1, w, h, ticks, sx, sy };
}

/** Grid lines and y labels at round values. */
function yAxis(root: SVGSVGElement, s: IScale): void {
  const { ticks } = s;
  for (let v = ticks.lo; v <= ticks.hi + ticks.step / 2; v += ticks.step) {
    const y = s.sy(v);
    root.appendChild(svg('line', { x1: LEFT, x2: s.w - RIGHT, y1: y, y2: y, class: 'jp-TorchDist-chartGrid' }));
    root.appendChild(label(LEFT - 6, y + 3.5, v.toFixed(ticks.decimals), 'end'));
  }
}

/** The first and last whole x on the x axis (`step 1` ... `200`). */
function xEnds(root: SVGSVGElement, s: IScale, xName: string): void {
  const xFirst = Math.ceil(s.x0);
  const xLast = Math.floor(s.x1);
  root.appendChild(label(s.sx(xFirst), s.h - 6, `${xName} ${xFirst}`, 'start'));
  if (xLast > xFirst) {
    root.appendChild(label(s.sx(xLast), s.h - 6, String(xLast), 'end'));
  }
}

/** One curve (a dot when it has one point), its label as the tooltip. */
export function curve(series: ISeries, colour: string, faint: boolean, s: IScale): SVGElement {
  if (series.points.length === 1) {
    const [x, y] = series.points[0];
    return svg('circle', { cx: s.sx(x), cy: s.sy(y), r: 2.5, fill: colour });
  }
  const pts = series.points.map(([x, y]) => `${s.sx(x).toFixed(1)},${s.sy(y).toFixed(1)}`).join(' ');
  const line = svg('polyline', {
    stroke: colour,
    fill: 'none',
    'vector-effect': 'non-scaling-stroke',
    'stroke-opacity': faint ? 0.55 : 0.95,
    points: pts,
    'stroke-width': 1.6
  });
  const title = svg('title', {});
  title.textContent = series.label ?? `rank ${series.rank}`;
  line.appendChild(title);
  return line;
}

/** An empty chart with its y axis for `scale`, and x labels named `xName` (null: the caller labels x). */
export function chartRoot(cls: string, label: string, scale: IScale, xName: string | null = 'step'): SVGSVGElement {
  const root = svg('svg', { viewBox: `0 0 ${scale.w} ${scale.h}`, class: cls, role: 'img', 'aria-label': label });
  yAxis(root as SVGSVGElement, scale);
  if (xName !== null) {
    xEnds(root as SVGSVGElement, scale, xName);
  }
  return root as SVGSVGElement;
}

/**
 * Draw the curves. The SVG scales to its container's width (viewBox), the
 * stroke width stays constant.
 */
export function lossChart(series: ISeries[]): SVGSVGElement {
  const scale = scaleFor(series);
  const root = chartRoot('jp-TorchDist-chart', 'loss per rank', scale);
  const many = series.length > PALETTE.length;
  series.forEach((s, i) => {
    root.appendChild(curve(s, colourOf(series, i), many, scale));
  });
  return root;
}

/** One point of a many-rank run's loss band: the median step, and the min, median and max loss there. */
export type BandPoint = [number, number, number, number];

/** Keep finite [step, min, median, max] rows only. */
export function cleanBand(raw: unknown): BandPoint[] {
  if (!Array.isArray(raw)) {
    return [];
  }
  const out: BandPoint[] = [];
  for (const p of raw) {
    if (Array.isArray(p) && p.length >= 4 && p.slice(0, 4).every(v => typeof v === 'number' && Number.isFinite(v))) {
      out.push([p[0], p[1], p[2], p[3]]);
    }
  }
  return out;
}

/**
 * The loss of a many-rank run: the median as a line inside the min–max band of the ranks, over the run
 * (the same axes and scale as `lossChart`).
 */
export function bandChart(band: BandPoint[]): SVGSVGElement {
  const lows: Array<[number, number]> = band.map(([x, lo]) => [x, lo]);
  const highs: Array<[number, number]> = band.map(([x, , , hi]) => [x, hi]);
  const medians: Array<[number, number]> = band.map(([x, , mid]) => [x, mid]);
  const scale = scaleFor([
    { rank: 0, points: lows },
    { rank: 0, points: highs }
  ]);
  const root = chartRoot('jp-TorchDist-chart jp-TorchDist-bandChart', 'loss: median and min to max of the ranks', scale);
  const at = ([x, y]: [number, number]): string => `${scale.sx(x).toFixed(1)},${scale.sy(y).toFixed(1)}`;
  const area = svg('polygon', {
    points: [...highs.map(at), ...lows.slice().reverse().map(at)].join(' '),
    fill: PALETTE[0],
    'fill-opacity': 0.18,
    stroke: 'none',
    class: 'jp-TorchDist-bandArea'
  });
  const areaTitle = svg('title', {});
  areaTitle.textContent = 'min to max of the ranks';
  area.appendChild(areaTitle);
  root.appendChild(area);
  root.appendChild(curve({ rank: 0, points: medians, label: 'median of the ranks' }, PALETTE[0], false, scale));
  return root;
}
