/**
 * Small pure helpers: number and time formatting, defensive field access.
 */

export const DASH = '\u2014';

/** A finite number, or null for anything else (strings, NaN, booleans...). */
export function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** A string, or '' for anything that is not one. */
export function str(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  if (value === null || value === undefined) {
    return '';
  }
  return String(value);
}

/** Seconds as `0.42 s`, `12.3 s`, `2m 05s`, `1h 02m`. */
export function duration(seconds: unknown): string {
  const s = num(seconds);
  if (s === null || s < 0) {
    return DASH;
  }
  if (s < 10) {
    return `${s.toFixed(2)} s`;
  }
  if (s < 60) {
    return `${s.toFixed(1)} s`;
  }
  const whole = Math.round(s);
  if (whole < 3600) {
    const m = Math.floor(whole / 60);
    return `${m}m ${String(whole % 60).padStart(2, '0')}s`;
  }
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  return `${h}h ${String(m).padStart(2, '0')}m`;
}

/**
 * A metric value, compact: 4 significant digits, exponent when tiny or huge.
 * `steady` keeps trailing zeros, so live numbers do not change width.
 */
export function metric(value: unknown, steady = false): string {
  const n = num(value);
  if (n === null) {
    const s = str(value);
    return s.length > 40 ? `${s.slice(0, 39)}\u2026` : s;
  }
  if (Number.isInteger(n) && Math.abs(n) < 1e9) {
    return String(n);
  }
  const a = Math.abs(n);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) {
    return n.toExponential(2);
  }
  return steady ? n.toPrecision(4) : String(Number(n.toPrecision(4)));
}

/** Steps per second. */
export function rate(value: unknown): string {
  const n = num(value);
  if (n === null) {
    return DASH;
  }
  const digits = n >= 100 ? 0 : n >= 10 ? 1 : 2;
  return `${n.toFixed(digits)} it/s`;
}

const GROUPED = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** `1,234` (one formatter for all: `toLocaleString` builds one per call, slow in a 1,024-rank redraw) */
export function count(value: unknown): string {
  const n = num(value);
  if (n === null) {
    return '0';
  }
  const whole = Math.round(n);
  return Math.abs(whole) < 1000 ? String(whole) : GROUPED.format(whole);
}

/** Cut a string to `max` characters with an ellipsis. */
export function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}\u2026` : text;
}

/** A running clock: `0:07`, `12:34`, `1:02:03`. */
export function clock(seconds: unknown): string {
  const s = num(seconds);
  if (s === null || s < 0) {
    return DASH;
  }
  const whole = Math.floor(s);
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  const sec = String(whole % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`;
}
