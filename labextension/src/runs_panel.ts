/**
 * "Distributed runs": JupyterLab's left-sidebar panel of every run of the user's kernels (`runs_plugin.ts` adds it).
 *
 * While the panel is on show it polls the server extension's list (`runs_api.ts`): every `FAST_MS` while a run
 * is going, every `SLOW_MS` otherwise, with `If-None-Match` (an unchanged list costs a bodiless 304); hidden, it
 * asks nothing. Its rows (`runs_rows.ts`) open the notebook at the run's cell, the run's report in a tab
 * (`runs_report.ts`), the tracker's or the Spark UI's page, or stop the run (its kernel takes the request even
 * while busy with a cell).
 */
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { el } from './dom';
import { morphChildren } from './morph';
import { IRunEntry, isGoing, RunsClient } from './runs_api';
import { openReport, IShellLike } from './runs_report';
import { IRunsState, R, renderRuns } from './runs_rows';

export const FAST_MS = 1000;
export const SLOW_MS = 5000;

/** The parts of `JupyterFrontEnd` the panel uses. */
export interface IRunsApp {
  shell: IShellLike;
  commands: { execute(id: string, args?: unknown): Promise<unknown> };
}

interface INotebookLike {
  id: string;
  context?: { ready?: Promise<void> };
  content?: {
    widgets?: readonly { model?: { id?: string }; node: HTMLElement }[];
    activeCellIndex: number;
    activeCell?: { model?: { sharedModel?: { setSource(text: string): void } } } | null;
    scrollToItem?: (index: number, behavior?: string, margin?: number, align?: string) => Promise<void>;
  };
}

/** Open the notebook at `path` and bring the cell `cellId` into view (when the front end said which it was). */
export async function openNotebook(app: IRunsApp, path: string, cellId: string | null): Promise<void> {
  const widget = (await app.commands.execute('docmanager:open', { path })) as INotebookLike | undefined;
  if (!widget) {
    return;
  }
  await widget.context?.ready;
  app.shell.activateById(widget.id);
  const nb = widget.content;
  const index = cellId && nb?.widgets ? nb.widgets.findIndex(c => c.model?.id === cellId) : -1;
  if (nb && index >= 0) {
    nb.activeCellIndex = index;
    if (nb.scrollToItem) {
      await nb.scrollToItem(index, 'auto', 0, 'center');
    } else {
      nb.widgets?.[index].node.scrollIntoView({ block: 'center' });
    }
  }
}

export class RunsPanel extends Widget {
  constructor(
    private readonly app: IRunsApp,
    private readonly client: RunsClient
  ) {
    super();
    this.id = 'jupyter-torchdist-runs';
    this.title.caption = 'Distributed runs';
    this.title.iconClass = `${R}-icon`;
    this.addClass('jp-TorchDist');
    this.addClass(`${R}-panel`);
    const header = el('div', `${R}-header`);
    header.appendChild(el('span', `${R}-heading`, 'Distributed runs'));
    this._status = el('div', `${R}-status`);
    this._body = el('div', `${R}-body`);
    this.node.append(header, this._status, this._body);
    this.node.addEventListener('click', this._click);
  }

  /** The runs as last listed. */
  get entries(): IRunEntry[] {
    return this._entries;
  }

  /** Poll now (after a stop, or when shown). */
  refresh(): void {
    this._schedule(0);
  }

  dispose(): void {
    this._clear();
    this.node.removeEventListener('click', this._click);
    super.dispose();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._schedule(0);
  }

  protected onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._clear();
  }

  private async _poll(): Promise<void> {
    this._timer = null;
    try {
      const listed = await this.client.list();
      if (listed !== null) {
        this._entries = listed;
        this._forgetStops();
      }
      this._status.textContent = '';
    } catch (reason) {
      this._status.textContent = `The runs list is not available: ${(reason as Error).message}. Is the ` +
        'jupyter-torchdist server extension enabled? (jupyter server extension list)';
    }
    this._draw();
    if (this.isVisible) {
      this._schedule(this._entries.some(isGoing) || this._state.stopping.size ? FAST_MS : SLOW_MS);
    }
  }

  private _forgetStops(): void {
    for (const id of [...this._state.stopping.keys()]) {
      const entry = this._entries.find(e => e.id === id);
      if (!entry || !isGoing(entry) || (entry.state === 'stopping' && this._state.stopping.get(id) === 'asked')) {
        this._state.stopping.delete(id);
      }
    }
  }

  private _draw(): void {
    this._state.now = Date.now() / 1000;
    const next = document.createElement('div');
    next.appendChild(renderRuns(this._entries, this._state));
    morphChildren(this._body, next);
  }

  private _schedule(ms: number): void {
    this._clear();
    this._timer = window.setTimeout(() => void this._poll(), ms);
  }

  private _clear(): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
  }

  private _act(action: string, entry: IRunEntry): void {
    if (action === 'toggle') {
      this._state.open.has(entry.id) ? this._state.open.delete(entry.id) : this._state.open.add(entry.id);
      this._draw();
    } else if (action === 'notebook' && entry.notebook) {
      openNotebook(this.app, entry.notebook, entry.cell_id).catch(reason => {
        this._status.textContent = `Could not open ${entry.notebook}: ${(reason as Error).message}`;
      });
    } else if (action === 'report') {
      openReport(this.app.shell, this.client, entry);
    } else if (action === 'stop') {
      this._stop(entry);
    } else if (action === 'attach') {
      this._attach(entry).catch(reason => {
        this._status.textContent = `Could not attach: ${(reason as Error).message}`;
      });
    }
  }

  /** A detached run: a new cell below the active one of the notebook on show, `%distribute_attach ID` in it. */
  private async _attach(entry: IRunEntry): Promise<void> {
    const current = this.app.shell.currentWidget as INotebookLike | null | undefined;
    const notebook = current?.content;
    if (!current || !notebook || typeof notebook.activeCellIndex !== 'number') {
      this._status.textContent = `Open a notebook to attach in: Attach adds %distribute_attach ${entry.id} to it`;
      return;
    }
    this.app.shell.activateById(current.id);
    await this.app.commands.execute('notebook:insert-cell-below');
    const cell = notebook.activeCell;
    cell?.model?.sharedModel?.setSource(`%distribute_attach ${entry.id}`);
    this._status.textContent = '';
  }

  private _stop(entry: IRunEntry): void {
    this._state.stopping.set(entry.id, 'asked');
    this._draw();
    this.client.stop(entry.id).then(
      () => this.refresh(),
      reason => {
        this._state.stopping.set(entry.id, `Could not stop it: ${(reason as Error).message}`);
        this._draw();
      }
    );
  }

  private readonly _click = (event: MouseEvent): void => {
    const target = event.target instanceof Element ? event.target.closest('[data-action]') : null;
    const row = target?.closest(`.${R}-row`) as HTMLElement | null;
    const entry = row ? this._entries.find(e => e.id === row.dataset.id) : undefined;
    if (!target || !entry || (target as HTMLButtonElement).disabled) {
      return;
    }
    event.preventDefault();
    this._act((target as HTMLElement).dataset.action ?? '', entry);
  };

  private readonly _status: HTMLElement;
  private readonly _body: HTMLElement;
  private _entries: IRunEntry[] = [];
  private _state: IRunsState = { open: new Set(), stopping: new Map(), now: Date.now() / 1000 };
  private _timer: number | null = null;
}
