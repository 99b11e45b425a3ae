/**
 * jupyter-torchdist for JupyterLab and Notebook 7: the MIME renderer of
 * `%%distribute` run reports (this module) and the plugin behind the live
 * view's Stop button (`plugin.ts`).
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { CompareView } from './compare_view';
import { ReportView } from './view';

/** The MIME type of a run snapshot (see `jupyter_torchdist/views/report.py`). */
export const MIME_TYPE = 'application/vnd.jupyter-torchdist.run+json';

/** The MIME type of a sweep snapshot (see `jupyter_torchdist/views/compare.py`). */
export const SWEEP_MIME_TYPE = 'application/vnd.jupyter-torchdist.sweep+json';

/**
 * Draws one run snapshot. Re-rendering the same widget (an `update_display`)
 * patches the page in place, keeping open sections, the picked log and
 * scroll positions.
 */
export class RunReportRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('jp-TorchDist');
    this._view = this._mimeType === SWEEP_MIME_TYPE ? new CompareView(this.node, false) : new ReportView(this.node);
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    this._view.render(model.data[this._mimeType]);
    return Promise.resolve();
  }

  dispose(): void {
    if (!this.isDisposed) {
      this._view.dispose();
    }
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this._view instanceof ReportView) {
      this._view.restoreScroll();
    }
  }

  private readonly _view: ReportView | CompareView;
  private readonly _mimeType: string;
}

/** Builds renderers; safe because no snapshot text is ever parsed as HTML. */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE, SWEEP_MIME_TYPE],
  defaultRank: 0,
  createRenderer: options => new RunReportRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'jupyter-torchdist:run-report',
  description: 'Renders %%distribute run reports (per-rank table, failure, loss curve, logs) and sweep reports.',
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
