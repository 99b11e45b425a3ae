/**
 * What every part of the renderer shares: labels, constants, and the user's view state.
 */

/** The prefix of every class name the renderer sets (style/base.css). */
export const P = 'jp-TorchDist';

export const STATUS_LABEL: Record<string, string> = {
  succeeded: 'Succeeded',
  failed: 'Failed',
  timeout: 'Timed out',
  interrupted: 'Interrupted',
  running: 'Running',
  starting: 'Starting',
  stopping: 'Stopping',
  queued: 'Queued'
};

export const KIND_LABEL: Record<string, string> = {
  exception: 'raised an exception',
  exit: 'process exited',
  lost: 'lost by the launcher',
  launch: 'failed to launch'
};

export const LOSS_KEYS = ['loss', 'train_loss', 'training_loss'];

/** Rank (and sweep member) states in the order the summary counts them (`views/style.py` has the same). */
export const STATE_ORDER = ['running', 'starting', 'pending', 'queued', 'done', 'stopped_early', 'stopped', 'failed'];

/** Run statuses during which a Stop control makes sense. */
export const IN_FLIGHT = ['queued', 'starting', 'running', 'stopping'];

/** Rank states after which a rank's clock no longer runs. */
export const RANK_FINAL = ['done', 'failed', 'stopped'];

/** Log lines shown before "show all"; the pane scrolls to the rest either way. */
export const LOG_PREVIEW_LINES = 12;

/** What the user changed in a report, carried across redraws (live updates). */
export interface IViewState {
  /** Sections the user opened or closed, by key, where that differs from the default. */
  details: Record<string, boolean>;
  /** The rank whose log the user picked; null: the default one. */
  logRank: number | null;
  /** Show every log line of the snapshot at full height. */
  logAll: boolean;
  /** Many-rank runs (`summary.ts`, `paged.ts`): the table's page (0-based), its search text and sort... */
  page: number;
  search: string;
  /** A column of the paged table ("step", "rate", "loss"); null: by rank. */
  sort: string | null;
  sortDesc: boolean;
  /** ... and the rank whose details are open (null: none). */
  openRank: number | null;
}

/** What the Stop control shows. */
export type StopState = 'ready' | 'sent' | 'hint' | 'unreachable';

/** Extras of the live view. */
export interface ILiveOptions {
  stop: StopState;
  /** The Stacks control (`stacks.ts`): the same states as Stop's. */
  stacks?: StopState;
  /** Seconds since the snapshot arrived: clocks of a running run keep ticking. */
  extra: number;
  /** A many-rank run's table, synced apart from the snapshot (less often); used instead of the snapshot's. */
  table?: unknown;
}

export function emptyState(): IViewState {
  return { details: {}, logRank: null, logAll: false, page: 0, search: '', sort: null, sortDesc: false, openRank: null };
}
