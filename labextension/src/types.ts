/**
 * The run snapshot drawn by the renderer.
 *
 * Mirrors `jupyter_torchdist/views/schema.py` (version 1; a test holds the two together).
 * Every field is treated as untrusted and possibly missing: a report saved
 * by another version, or edited by hand, must still render.
 */

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
  ranks?: IRankSnapshot[];
}
