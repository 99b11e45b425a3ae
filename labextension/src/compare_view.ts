/**
 * A sweep's comparison view on the page: the saved report's renderer (`index.ts`) and the live widget
 * (`widget.ts`, for a model with `sweep`) both use it. Each draw builds a fresh tree (`compare.ts`) and patches
 * it in (`morph.ts`); the sort the user picked lives here. A live view's Stop on a row stops that run only
 * (the plugin asks the kernel over its control channel); when the sweep has ended its report goes in the
 * widget's place in the notebook, as a background run's does.
 */
import { ISort, renderCompare } from './compare';
import { morphChildren } from './morph';
import { REPORT_PLACED, requestReport, requestStop } from './stop';

const P = 'jp-TorchDist';

export class CompareView {
  constructor(
    host: HTMLElement,
    private readonly live: boolean
  ) {
    this.root = document.createElement('div');
    this.root.className = `${P}-root`;
    host.appendChild(this.root);
    this.root.addEventListener('click', this.click);
  }

  render(data: unknown): void {
    this.data = data;
    this.draw();
  }

  dispose(): void {
    this.root.removeEventListener('click', this.click);
    this.root.remove();
  }

  private draw(): void {
    const next = document.createElement('div');
    next.appendChild(renderCompare(this.data, this.sort, this.live));
    morphChildren(this.root, next);
  }

  private click = (event: MouseEvent): void => {
    const hit = (event.target as Element | null)?.closest?.('[data-action]');
    if (!(hit instanceof HTMLElement) || !this.root.contains(hit)) {
      return;
    }
    if (hit.dataset.action === 'sort') {
      const key = hit.dataset.key ?? null;
      this.sort = { key, descending: this.sort.key === key ? !this.sort.descending : false };
      this.draw();
    } else if (hit.dataset.action === 'stop' && hit.dataset.run) {
      if (requestStop(hit, Number(hit.dataset.run))) {
        hit.textContent = 'Stopping\u2026';
        (hit as HTMLButtonElement).disabled = true;
      }
    }
  };

  private readonly root: HTMLElement;
  private data: unknown = null;
  private sort: ISort = { key: null, descending: false };
}

/** The parts of anywidget's model the comparison view uses. */
interface ISweepModel {
  get(name: string): unknown;
  on(event: string, callback: () => void): void;
  off(event: string, callback: () => void): void;
  send(content: object): void; // a custom message to the kernel's widget
}

/** The live comparison view: draws the synced `sweep`, at most once a frame. */
export class CompareWidget {
  constructor(
    private readonly model: ISweepModel,
    private readonly el: HTMLElement
  ) {
    el.classList.add('jp-TorchDist', 'jp-TorchDist-widget');
    this.view = new CompareView(el, true);
    model.on('change:sweep', this.schedule);
    model.on('change:report', this.onReport);
    this.draw();
    this.onReport();
  }

  dispose(): void {
    this.model.off('change:sweep', this.schedule);
    this.model.off('change:report', this.onReport);
    if (this.frame) {
      cancelAnimationFrame(this.frame);
    }
    this.view.dispose();
  }

  private draw = (): void => {
    this.frame = 0;
    this.view.render(this.model.get('sweep'));
  };

  private schedule = (): void => {
    if (!this.frame) {
      this.frame = requestAnimationFrame(this.draw);
    }
  };

  private onReport = (): void => {
    const bundle = this.model.get('report');
    if (bundle && typeof bundle === 'object' && Object.keys(bundle).length && !this.reported) {
      this.reported = requestReport(this.el, bundle as Record<string, unknown>);
      if (this.reported) {
        this.model.send({ event: REPORT_PLACED }); // the kernel may close this widget: the report holds the run
      }
    }
  };

  private readonly view: CompareView;
  private frame = 0;
  private reported = false;
}
