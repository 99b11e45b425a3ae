/**
 * A run's report in a JupyterLab tab, opened from the runs panel: the snapshot the run's cell shows, drawn by the
 * same renderer (`view.ts` for a run, `compare_view.ts` for a sweep). While the run goes on, the tab asks for a
 * fresh report every `REFRESH_MS` (with `If-None-Match`); once it has ended, never again.
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { CompareView } from './compare_view';
import { el } from './dom';
import { ENDED, IRunEntry, RunsClient } from './runs_api';
import { ReportView } from './view';

export const REFRESH_MS = 2000;
const SWEEP_MIME = 'application/vnd.jupyter-torchdist.sweep+json';

/** The parts of JupyterLab's shell the panel and the tabs use. */
export interface IShellLike {
  add(widget: Widget, area?: string, options?: Record<string, unknown>): void;
  activateById(id: string): void;
  widgets?(area?: string): Iterable<Widget>;
  /** The main area's widget on show (a notebook, when the user is in one). */
  readonly currentWidget?: unknown;
}

export class RunReportTab extends Widget {
  constructor(
    private readonly client: RunsClient,
    private readonly entry: IRunEntry
  ) {
    super();
    this.id = `jupyter-torchdist-report-${entry.id}`;
    this.title.label = `${entry.kind === 'sweep' ? 'Sweep' : 'Run'} ${entry.id}`;
    this.title.caption = `${entry.cell} (${entry.notebook ?? 'no notebook'})`;
    this.title.closable = true;
    this.addClass('jp-TorchDist');
    this.addClass('jp-TorchDist-runsReport');
    this._note = el('div', 'jp-TorchDist-runs-status');
    this._host = el('div', 'jp-TorchDist-runs-reportBody');
    this.node.append(this._note, this._host);
  }

  /** Fetch the report (again) and draw it. */
  async refresh(): Promise<void> {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
    let going = true;
    try {
      if (this._going) {
        await this.client.freshReport(this.entry.id).catch(() => false); // a running run's, written when asked
      }
      const got = await this.client.report(this.entry.id, this._etag);
      if (got) {
        this._etag = got.etag;
        this._show(got.report.mime, got.report.data);
        going = !ENDED.includes(got.report.state);
      } else {
        going = this._going;
      }
      this._note.textContent = '';
    } catch (reason) {
      this._note.textContent = `No report to show: ${(reason as Error).message}`;
    }
    this._going = going;
    if (going && !this.isDisposed) {
      this._timer = window.setTimeout(() => void this.refresh(), REFRESH_MS);
    }
  }

  dispose(): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
    }
    this._view?.dispose();
    super.dispose();
  }

  protected onCloseRequest(msg: Message): void {
    super.onCloseRequest(msg);
    this.dispose();
  }

  private _show(mime: string, data: unknown): void {
    const sweep = mime === SWEEP_MIME;
    if (!this._view || (this._view instanceof CompareView) !== sweep) {
      this._view?.dispose();
      this._view = sweep ? new CompareView(this._host, false) : new ReportView(this._host);
    }
    this._view.render(data);
  }

  private readonly _note: HTMLElement;
  private readonly _host: HTMLElement;
  private _view: ReportView | CompareView | null = null;
  private _etag: string | null = null;
  private _going = true;
  private _timer: number | null = null;
}

/** Open (or bring forward) the tab of `entry`'s report. */
export function openReport(shell: IShellLike, client: RunsClient, entry: IRunEntry): void {
  const id = `jupyter-torchdist-report-${entry.id}`;
  for (const widget of shell.widgets ? shell.widgets('main') : []) {
    if (widget.id === id) {
      shell.activateById(id);
      void (widget as RunReportTab).refresh();
      return;
    }
  }
  const tab = new RunReportTab(client, entry);
  shell.add(tab, 'main');
  shell.activateById(tab.id);
  void tab.refresh();
}
