/**
 * The run snapshot drawn by the renderer.
 *
 * Mirrors `jupyter_torchdist/views/schema.py` (version 1; a test holds the two together).
 * Every field is treated as untrusted and possibly missing: a report saved
 * by another version, or edited by hand, must still render.
 */

/** Where a rank's time goes (sampled about once a second by the rank). */
export interface IUsage {
  cpu_pct?: number | null;
  rss?: number | null;
  gpu_util?: number | null;
  gpu_mem?: number | null;
  /** Share of its time spent waiting in batches() (0..1); null without batches(). */
  input_wait?: number | null;
  rows?: number;
  rows_per_s?: number | null;
}

/** The data job feeding batches() (null when the run reads no DataFrame). */
export interface IDataJob {
  workers?: number;
  active?: number;
  running?: number;
  rows?: number;
  rows_per_s?: number | null;
  seconds?: number | null;
}

/** One line of a rank's stack, outermost first. */
export interface IFrame {
  /** "cell line 4", "train.py line 12". */
  where?: string;
  name?: string;
  code?: string;
  /** What the line is calling now ("dist.all_reduce"), when known. */
  call?: string;
  /** 0: the user's code; n > 0: n library frames folded into this line. */
  library?: number;
}

/** Where a rank is: its stack when last asked (Stacks, a stall, a stop). */
export interface IPlace {
  /** "waiting in all_reduce at cell line 4 for 15.2 s". */
  summary?: string;
  frames?: IFrame[];
  /** How long ago the stack was taken. */
  age_s?: number | null;
}

/** One rank's row. */
export interface IRankSnapshot {
  rank?: number;
  host?: string;
  state?: string;
  step?: number | null;
  total?: number | null;
  rate?: number | null;
  metrics?: Record<string, unknown>;
  last_line?: string;
  elapsed_s?: number | null;
  exit_code?: number | null;
  exit_signal?: string | null;
  error?: string | null;
  log_lines?: number;
  /** Lines the rank could not send: past its log budget. */
  log_dropped?: number;
  log_tail?: Array<[string, string]>;
  loss_history?: Array<[number, number]>;
  usage?: IUsage | null;
  place?: IPlace | null;
  /** "pdb" or "post-mortem" while its debugger waits for the user. */
  paused?: string | null;
}

/** A failure of another rank, shown below the root cause. */
export interface ISecondaryError {
  rank?: number;
  host?: string;
  summary?: string;
}

/** The root cause of a failed run. */
export interface IRunError {
  rank?: number;
  host?: string;
  kind?: string;
  summary?: string;
  traceback?: string;
  secondary?: ISecondaryError[];
  /** The other ranks' failures grouped by what they say, most ranks first. */
  echoes?: IGroup[];
}

/** One measure over the ranks that report it (min, 25th percentile, median, 75th percentile, max). */
export interface IQuantile {
  /** "step", "rate", "loss", "cpu_pct", "rss", "input_wait" or a reported metric. */
  name?: string;
  q?: number[];
  /** Ranks that report it. */
  n?: number;
}

/** The ranks of one host. */
export interface IHostGroup {
  host?: string;
  ranks?: number;
  /** Ranks by state. */
  counts?: Record<string, number>;
  /** The median step of its ranks. */
  step?: number | null;
  /** Their median rate. */
  rate?: number | null;
}

/** A rank worth a look, and why. */
export interface IOutlier {
  rank?: number;
  host?: string;
  /** failed, paused, stalled, behind, slowest, waiting on input. */
  why?: string;
  detail?: string;
}

/** Ranks that say the same thing (where they wait; the same echo of a failure), counted, not listed. */
export interface IGroup {
  summary?: string;
  ranks?: number;
  /** The first few of them. */
  sample?: number[];
}

/** A many-rank run at a glance (runs of more than 64 ranks). */
export interface ISummary {
  counts?: Record<string, number>;
  quantiles?: IQuantile[];
  /** [median step, min, median, max] of the ranks' latest loss, over the run. */
  loss_band?: number[][];
  hosts?: IHostGroup[];
  outliers?: IOutlier[];
  places?: IGroup[];
}

/** Every rank in a few columns: [rank, host index, state index, step, rate, loss], by rank. */
export interface ITable {
  /** "rank", "host", "state", "step", "rate", "loss". */
  columns?: string[];
  hosts?: string[];
  states?: string[];
  rows?: unknown[][];
}

/** The whole run. */
export interface IRunSnapshot {
  version?: number;
  title?: string;
  status?: string;
  headline?: string;
  backend?: string;
  options?: Record<string, unknown>;
  world_size?: number;
  elapsed_s?: number | null;
  value_repr?: string | null;
  error?: IRunError | null;
  /** Things the user should know that are not failures ("log lines dropped"). */
  notices?: string[];
  data?: IDataJob | null;
  ranks?: IRankSnapshot[];
  /** No rank moves and one waits in a collective: what the view says (the run goes on). */
  stall?: string | null;
  /** The kernel's number for the run (`jupyter_torchdist.runs()`). */
  run_id?: number | null;
  id?: string | null;
  /** The notebook went on while it ran: its Stop stops this run only (not the kernel's cell). */
  background?: boolean;
  /** Runs of more than 64 ranks: `ranks` then holds only the failed, outlier and asked-for ranks... */
  summary?: ISummary | null;
  /** ... and `table` every rank. */
  table?: ITable | null;
  /** --profile: where each rank's step time went (null: not profiled yet). */
  profile?: IProfile | null;
}

/** One rank's --profile window: shares of its wall time (0..1). */
export interface IProfileRank {
  rank?: number;
  first?: number | null;
  last?: number | null;
  steps?: number;
  step_s?: number | null;
  input?: number;
  compute?: number;
  comm?: number;
  other?: number;
  /** Its trace file (gzipped Chrome trace JSON: TensorBoard's profiler, Perfetto). */
  trace?: string | null;
  note?: string | null;
}

/** A --profile run's summary: a row per rank, and the slowest rank and why. */
export interface IProfile {
  folder?: string | null;
  ranks?: IProfileRank[];
  verdict?: string | null;
}

/** One run of a sweep, as the comparison view's row shows it (rank 0's progress and metrics). */
export interface ISweepRun {
  id?: number;
  params?: Record<string, unknown>;
  label?: string;
  state?: string;
  step?: number | null;
  total?: number | null;
  rate?: number | null;
  metrics?: Record<string, unknown>;
  elapsed_s?: number | null;
  loss?: Array<[number, number]>;
  value_repr?: string | null;
  error?: string | null;
  /** A member `state` "stopped_early" (by the sweep's early-stopping rule, not a failure): the step it stopped at... */
  stopped_early_at?: number | null;
  /** ... and the rule's reason, a sentence. */
  why?: string | null;
  /** The highest step it reported. */
  steps?: number | null;
  /** The sweep's metric (`ISweepSnapshot.metric`): its best value by the sweep's mode, and its latest. */
  metric_best?: number | null;
  metric_last?: number | null;
  /** A member from an earlier kernel of a resumed study: no live run (`id` is its member number). */
  past?: boolean;
}

/** A whole sweep: its comparison view and its saved report. */
export interface ISweepSnapshot {
  version?: number;
  title?: string;
  names?: string[];
  status?: string;
  elapsed_s?: number;
  concurrent?: number | null;
  counts?: Record<string, number>;
  runs?: ISweepRun[];
  /** What the sweep judges members by ("loss"), and which way is better: "min" or "max". */
  metric?: string;
  mode?: string;
  /** How members are picked: "grid", "random" or "optuna"; the rule that stops them early: "asha", "median", "none". */
  search?: string;
  early_stop?: string;
  /** Members planned in all (`runs` holds those picked so far). */
  trials?: number;
  /** The row id of the best finished member. */
  best_id?: number | null;
  /** Per parameter: "log", "linear" or "category" (how its effect is plotted). */
  scales?: Record<string, string>;
  /** [k, best metric among the first k members to finish], k = 1, 2, ... */
  best_so_far?: Array<[number, number]>;
}
