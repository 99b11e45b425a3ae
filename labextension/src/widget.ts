/**
 * The live `%%distribute` view as an anywidget front end (ES module, bundled
 * into `jupyter_torchdist/static/widget.js` by `build-widget.mjs`).
 *
 * It draws the synced `snapshot` with the same renderer as the saved run
 * report, adds the Stop control, and keeps the clocks ticking between
 * snapshots (the kernel only sends one when something changed).
 */
import { CompareWidget } from './compare_view';
import { backgroundRun } from './header';
import { requestFocus } from './paged';
import { IN_FLIGHT, ILiveOptions, StopState } from './render';
import { requestStacks } from './stacks';
import { REPORT_PLACED, requestReport, requestStop, stopAvailable } from './stop';
import { IRunSnapshot } from './types';
import { ReportView } from './view';

/** The parts of anywidget's model we use. */
export interface IModel {
  get(name: string): unknown;
  set(name: string, value: unknown): void;
  save_changes(): void;
  on(event: string, callback: () => void): void;
  off(event: string, callback: () => void): void;
  send(content: object): void; // a custom message to the kernel's widget
}

interface IRenderProps {
  model: IModel;
  el: HTMLElement;
}

function inFlight(snapshot: unknown): boolean {
  const status = (snapshot as { status?: unknown } | null)?.status;
  return typeof status === 'string' && IN_FLIGHT.includes(status);
}

/** One live view on the page: draws the synced snapshot, at most once a frame, only while visible. */
class LiveWidget {
  constructor(
    private readonly model: IRenderProps['model'],
    private readonly el: HTMLElement
  ) {
    el.classList.add('jp-TorchDist', 'jp-TorchDist-widget');
    this.view = new ReportView(el, {
      onStop: button => this.onStop(button),
      onStacks: button => this.onStacks(button),
      onFocus: rank => this.onFocus(rank)
    });
    model.on('change:snapshot', this.onChange);
    model.on('change:table', this.onChange); // a many-rank run's table comes apart from its snapshot
    model.on('change:report', this.onReport);
    // A view scrolled out of sight (a long notebook) costs nothing until it is seen again.
    this.watcher =
      typeof IntersectionObserver === 'function'
        ? new IntersectionObserver(entries => this.onVisible(entries.some(e => e.isIntersecting)))
        : null;
    this.watcher?.observe(el);
    this.tick = window.setInterval(() => {
      if (inFlight(model.get('snapshot'))) {
        this.schedule(); // clocks keep ticking between snapshots
      }
    }, 1000);
    this.draw();
    this.onReport();
  }

  dispose(): void {
    this.model.off('change:snapshot', this.onChange);
    this.model.off('change:table', this.onChange);
    this.model.off('change:report', this.onReport);
    this.watcher?.disconnect();
    window.clearInterval(this.tick);
    if (this.frame) {
      cancelAnimationFrame(this.frame);
    }
    this.view.dispose();
  }

  private draw = (): void => {
    this.frame = 0;
    if (!this.visible) {
      this.stale = true; // drawn when scrolled back into view
      return;
    }
    this.stale = false;
    if (this.stop === 'hint' && stopAvailable()) {
      this.stop = 'ready'; // the plugin activated after this view was first drawn
    }
    if (this.stacks === 'hint' && stopAvailable()) {
      this.stacks = 'ready';
    }
    const live: ILiveOptions = {
      stop: this.stop,
      stacks: this.stacks,
      extra: (performance.now() - this.received) / 1000,
      table: this.model.get('table')
    };
    this.view.render(this.model.get('snapshot'), live);
  };

  /** Coalesce bursts of updates into one draw per frame; none while the page is hidden. */
  private schedule(): void {
    if (!this.frame) {
      this.frame = requestAnimationFrame(this.draw);
    }
  }

  private onChange = (): void => {
    this.received = performance.now();
    this.schedule();
  };

  private onVisible(visible: boolean): void {
    this.visible = visible;
    if (visible && this.stale) {
      this.schedule();
    }
  }

  /** A background run ended: its report goes in the view's place in the notebook (the plugin does it). */
  private onReport = (): void => {
    const bundle = this.model.get('report');
    if (bundle && typeof bundle === 'object' && Object.keys(bundle).length && !this.reported) {
      this.reported = requestReport(this.el, bundle as Record<string, unknown>);
      if (this.reported) {
        this.model.send({ event: REPORT_PLACED }); // the kernel may close this widget: the report holds the run
      }
    }
  };

  private run(): number | null {
    const snap = this.model.get('snapshot');
    return snap && typeof snap === 'object' ? backgroundRun(snap as IRunSnapshot) : null;
  }

  /** The user opened a rank of a many-rank run: the kernel sends its full row (log, stack, loss) from now on. */
  private onFocus(rank: number | null): void {
    const ranks = rank === null ? [] : [rank];
    try {
      this.model.set('focus', ranks);
      this.model.save_changes(); // reaches the kernel once its shell is free (a background run: at once)
    } catch (err) {
      console.warn('jupyter-torchdist: could not ask for the rank', err);
    }
    requestFocus(this.el, ranks, this.run()); // reaches a busy kernel (its control channel), through the plugin
  }

  private onStop(button: HTMLElement): void {
    this.stop = requestStop(button, this.run()) ? 'sent' : stopAvailable() ? 'unreachable' : 'hint';
    this.draw();
  }

  private onStacks(button: HTMLElement): void {
    this.stacks = requestStacks(button, this.run()) ? 'sent' : stopAvailable() ? 'unreachable' : 'hint';
    this.draw();
    if (this.stacks === 'sent') {
      window.setTimeout(() => {
        this.stacks = 'ready'; // the answers come with the next snapshots; another press asks again
        this.schedule();
      }, 1500);
    }
  }

  private readonly view: ReportView;
  private readonly watcher: IntersectionObserver | null;
  private readonly tick: number;
  private stop: StopState = stopAvailable() ? 'ready' : 'hint';
  private stacks: StopState = stopAvailable() ? 'ready' : 'hint';
  private received = performance.now();
  private frame = 0;
  private visible = true;
  private stale = false;
  private reported = false;
}

function render({ model, el }: IRenderProps): () => void {
  // One front end for both widgets: a sweep's comparison view has `sweep`, a run's view `snapshot`.
  const widget = model.get('sweep') !== undefined ? new CompareWidget(model, el) : new LiveWidget(model, el);
  return () => widget.dispose();
}

export default { render };
