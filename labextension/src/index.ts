/**
 * jupyter-torchdist: a JupyterLab MIME renderer for `%%distribute` run reports.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { captureState, IViewState, renderReport, restoreScroll } from './render';

/** The MIME type of a run snapshot (see `jupyter_torchdist/run_report.py`). */
export const MIME_TYPE = 'application/vnd.jupyter-torchdist.run+json';

/**
 * Draws one run snapshot. Re-rendering the same widget (a live
 * `update_display`) keeps the open sections, the chosen log and the scroll
 * positions.
 */
export class RunReportRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('jp-TorchDist');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const state = captureState(this.node);
    const report = renderReport(model.data[this._mimeType], state);
    this.node.replaceChildren(report);
    this._state = state;
    if (this.isAttached) {
      restoreScroll(this.node, state);
    }
    return Promise.resolve();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    restoreScroll(this.node, this._state);
  }

  private _state: IViewState | null = null;
  private readonly _mimeType: string;
}

/** Builds renderers; safe because no snapshot text is ever parsed as HTML. */
export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: 0,
  createRenderer: options => new RunReportRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'jupyter-torchdist:run-report',
  description: 'Renders %%distribute run reports: per-rank table, failure, loss curve, logs.',
  rendererFactory,
  rank: 0,
  dataType: 'json'
};

export default extension;
