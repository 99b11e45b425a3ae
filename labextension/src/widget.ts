/**
 * The live `%%distribute` view as an anywidget front end (ES module, bundled
 * into `jupyter_torchdist/static/widget.js` by `build-widget.mjs`).
 *
 * It draws the synced `snapshot` with the same renderer as the saved run
 * report, adds the Stop control, and keeps the clocks ticking between
 * snapshots (the kernel only sends one when something changed).
 */
import { IN_FLIGHT, ILiveOptions, StopState } from './render';
import { requestStop, stopAvailable } from './stop';
import { ReportView } from './view';

/** The parts of anywidget's model we use. */
interface IModel {
  get(name: 'snapshot'): unknown;
  on(event: string, callback: () => void): void;
  off(event: string, callback: () => void): void;
}

interface IRenderProps {
  model: IModel;
  el: HTMLElement;
}

function inFlight(snapshot: unknown): boolean {
  const status = (snapshot as { status?: unknown } | null)?.status;
  return typeof status === 'string' && IN_FLIGHT.includes(status);
}

function render({ model, el }: IRenderProps): () => void {
  el.classList.add('jp-TorchDist', 'jp-TorchDist-widget');
  let stop: StopState = stopAvailable() ? 'ready' : 'hint';
  let received = performance.now();
  let frame = 0;
  let visible = true;
  let stale = false;

  const draw = (): void => {
    frame = 0;
    if (!visible) {
      stale = true; // drawn when scrolled back into view
      return;
    }
    stale = false;
    if (stop === 'hint' && stopAvailable()) {
      stop = 'ready'; // the plugin activated after this view was first drawn
    }
    const live: ILiveOptions = { stop, extra: (performance.now() - received) / 1000 };
    view.render(model.get('snapshot'), live);
  };
  // Coalesce bursts of updates into one draw per frame; none while the page is hidden.
  const schedule = (): void => {
    if (!frame) {
      frame = requestAnimationFrame(draw);
    }
  };
  const view = new ReportView(el, {
    onStop: button => {
      stop = requestStop(button) ? 'sent' : stopAvailable() ? 'unreachable' : 'hint';
      draw();
    }
  });
  const onChange = (): void => {
    received = performance.now();
    schedule();
  };
  model.on('change:snapshot', onChange);
  // A view scrolled out of sight (a long notebook) costs nothing until it is seen again.
  const watcher =
    typeof IntersectionObserver === 'function'
      ? new IntersectionObserver(entries => {
          visible = entries.some(e => e.isIntersecting);
          if (visible && stale) {
            schedule();
          }
        })
      : null;
  watcher?.observe(el);
  const tick = window.setInterval(() => {
    if (inFlight(model.get('snapshot'))) {
      schedule();
    }
  }, 1000);
  draw();
  return () => {
    model.off('change:snapshot', onChange);
    watcher?.disconnect();
    window.clearInterval(tick);
    if (frame) {
      cancelAnimationFrame(frame);
    }
    view.dispose();
  };
}

export default { render };
