/**
 * Notifications: when a background run or a sweep of any of the user's kernels ends (done, failed, stopped), a
 * JupyterLab notification names it, its notebook and its outcome, with a button that opens its report. A foreground
 * run is not announced: its cell shows the end where the user is looking.
 *
 * The notifier asks the server extension's list (`runs_api.ts`) every `POLL_MS`, with its own client and ETag, so an
 * unchanged list costs a bodiless 304 and the runs panel's own polling is not disturbed. A run is announced when it
 * was seen going and is now ended, or when it first appears already ended but was submitted after the notifier
 * started (a short run between two looks); runs that had ended before the page loaded are never announced. It goes
 * through JupyterLab's `apputils:notify` command, so it needs no JupyterLab token. Off by the setting
 * `notifications` of "Distributed runs".
 */
import { ENDED, IRunEntry, isGoing, RunsClient } from './runs_api';

export const POLL_MS = 5000;
export const OPEN_REPORT = 'jupyter-torchdist:open-report';
const NOTIFY = 'apputils:notify';
const AUTO_CLOSE_MS = 20000;
const TYPE: Record<string, string> = {
  done: 'success',
  failed: 'error',
  stopped: 'warning',
  stopped_early: 'info',
  lost: 'error'
};

export interface INotifyApp {
  commands: { execute(id: string, args?: unknown): Promise<unknown>; hasCommand?(id: string): boolean };
}

/** What the notification says: "run #3 (5c0e7a91d2b4) in a.ipynb failed: ValueError: ..." */
export function endedMessage(e: IRunEntry): string {
  const what = e.kind === 'sweep' ? `sweep #s${e.number}` : `run #${e.number}`;
  const where = e.notebook ? ` in ${e.notebook}` : '';
  const how = e.state === 'done' ? 'finished' : e.state === 'stopped_early' ? 'stopped early' : e.state;
  const outcome = e.outcome ? `: ${e.outcome}` : '';
  return `${what} (${e.id})${where} ${how}${outcome}`.slice(0, 300);
}

export class RunsNotifier {
  enabled = true;
  readonly latest = new Map<string, IRunEntry>(); // by id: what the report button opens
  private readonly _seen = new Map<string, string>(); // id -> the state it was last seen in
  private readonly _since = Date.now() / 1000;
  private _first = true;
  private _timer: number | null = null;

  constructor(
    private readonly app: INotifyApp,
    private readonly client: RunsClient
  ) {}

  start(): void {
    void this._poll();
  }

  dispose(): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  /** Take a list; the background runs and sweeps that ended since the last one (announced when enabled). */
  saw(list: IRunEntry[]): IRunEntry[] {
    const ended: IRunEntry[] = [];
    for (const e of list) {
      const before = this._seen.get(e.id);
      const announced = e.background && !e.sweep && !isGoing(e);
      const wasGoing = before !== undefined ? !ENDED.includes(before) : !this._first && e.submitted > this._since;
      if (announced && wasGoing) {
        ended.push(e);
      }
      this._seen.set(e.id, e.state);
      this.latest.set(e.id, e);
    }
    this._first = false;
    if (this.enabled) {
      ended.forEach(e => this._notify(e));
    }
    return ended;
  }

  private _notify(e: IRunEntry): void {
    const actions = [{ label: 'Report', caption: "Open the run's report", commandId: OPEN_REPORT, args: { id: e.id } }];
    const options = { autoClose: AUTO_CLOSE_MS, actions };
    this.app.commands.execute(NOTIFY, { message: endedMessage(e), type: TYPE[e.state] ?? 'info', options }).catch(
      reason => console.warn('jupyter-torchdist: no notification', reason)
    );
  }

  private async _poll(): Promise<void> {
    try {
      const list = await this.client.list();
      if (list) {
        this.saw(list);
      }
    } catch {
      // no server extension, or the server is restarting: the panel says so; the notifier stays quiet
    }
    this._timer = window.setTimeout(() => void this._poll(), POLL_MS);
  }
}
