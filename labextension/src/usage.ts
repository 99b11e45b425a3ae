/**
 * Where the time goes, in the words the Python views use (jupyter_torchdist/views/usage_words.py).
 *
 * Per rank: CPU (% of one core), memory, the GPU (utilisation · memory) under --gpu, and the share of
 * its time spent waiting for batches() data. For the run: the data job's workers and rows per second.
 * Columns appear only when some rank has them.
 */
import { isObject } from './dom';
import { DASH, count, num } from './format';
import { IDataJob, IRankSnapshot, IUsage } from './types';

/** The same threshold as the kernel's "input-bound" notice. */
export const INPUT_BOUND = 0.3;

function usageOf(r: IRankSnapshot): IUsage {
  return isObject(r.usage) ? (r.usage as IUsage) : {};
}

/** The usage columns this run has: CPU and Mem, GPU, Input wait. */
export function usageColumns(ranks: IRankSnapshot[]): string[] {
  const usages = ranks.map(usageOf);
  const cols: string[] = [];
  if (usages.some(u => num(u.rss) !== null || num(u.cpu_pct) !== null)) {
    cols.push('CPU', 'Mem');
  }
  if (usages.some(u => num(u.gpu_mem) !== null || num(u.gpu_util) !== null)) {
    cols.push('GPU');
  }
  if (usages.some(u => num(u.input_wait) !== null)) {
    cols.push('Input wait');
  }
  return cols;
}

export function pct(value: unknown): string {
  const n = num(value);
  return n === null ? DASH : `${n.toFixed(0)}%`;
}

/** `512 B`, `1.5 KB`, `12.0 MB`, `2.1 GB` (as the Python side's human_bytes). */
export function bytes(value: unknown): string {
  let n = num(value);
  if (n === null) {
    return DASH;
  }
  for (const unit of ['B', 'KB', 'MB']) {
    if (Math.abs(n) < 1024) {
      return unit === 'B' ? `${n.toFixed(0)} B` : `${n.toFixed(1)} ${unit}`;
    }
    n /= 1024;
  }
  return `${n.toFixed(1)} GB`;
}

export function inputBound(r: IRankSnapshot): boolean {
  const wait = num(usageOf(r).input_wait);
  return wait !== null && wait > INPUT_BOUND;
}

/** One rank's text for a usage column. */
export function usageCell(r: IRankSnapshot, column: string): string {
  const u = usageOf(r);
  switch (column) {
    case 'CPU':
      return pct(u.cpu_pct);
    case 'Mem':
      return bytes(u.rss);
    case 'GPU':
      return `${pct(u.gpu_util)} \u00b7 ${bytes(u.gpu_mem)}`;
    default: {
      const wait = num(u.input_wait);
      return wait === null ? DASH : pct(100 * wait);
    }
  }
}

/** What the data job has done: rows/s while it runs, the totals and their mean rate at the end. */
function dataAmount(data: IDataJob, active: boolean): string[] {
  const rows = `${count(data.rows)} rows`;
  const rate = num(data.rows_per_s);
  const seconds = num(data.seconds);
  if (active) {
    return rate === null ? [rows] : [`${count(rate)} rows/s`, rows];
  }
  if (seconds) {
    const mean = (num(data.rows) ?? 0) / seconds;
    return [`${rows} in ${seconds.toFixed(1)} s (${count(mean)} rows/s)`];
  }
  return [rows];
}

/**
 * While it runs `data: 2 workers (1 running) · 1,234 rows/s · 12,000 rows`; at the end
 * `data: 2 workers · 12,000 rows in 9.7 s (1,237 rows/s)`; '' without a data job.
 */
export function dataLine(data: IDataJob | null | undefined): string {
  if (!isObject(data)) {
    return '';
  }
  const workers = num(data.workers) ?? 0;
  const active = (num(data.active) ?? 0) > 0;
  const head =
    `data: ${workers} worker${workers === 1 ? '' : 's'}` +
    (active ? ` (${num(data.running) ?? 0} running)` : '');
  return [head, ...dataAmount(data, active)].join(' \u00b7 ');
}
