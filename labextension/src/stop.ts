/**
 * How the live view's Stop button reaches the kernel.
 *
 * While a `%%distribute` cell runs, the kernel's main thread is busy in the
 * magic, so a widget message would only be read after the run. An interrupt
 * (SIGINT) is read at once and stops the run cleanly. So the button sends a
 * bubbling DOM event; the JupyterLab plugin (`plugin.ts`, also in Notebook 7)
 * interrupts the kernel of the notebook that holds the button and marks the
 * event handled. Front ends without the plugin (VS Code) get a hint instead.
 */

/** The event the Stop button dispatches; bubbles and crosses shadow roots. */
export const STOP_EVENT = 'jupyter-torchdist:stop';

/** Set on `window` by the plugin: a stop event will be handled on this page. */
export const STOP_FLAG = '__jupyterTorchdistStop';

/** Whether this page has the plugin that turns a stop event into a kernel interrupt. */
export function stopAvailable(): boolean {
  return Boolean((window as unknown as Record<string, unknown>)[STOP_FLAG]);
}

/**
 * Ask for a stop from `origin`; true when a handler took it (called `preventDefault`). `run`: a background
 * run's number; the plugin then asks the kernel to stop that run only, over its control channel, since an
 * interrupt would stop whatever cell runs at that moment instead.
 */
export function requestStop(origin: HTMLElement, run: number | null = null): boolean {
  const event = new CustomEvent(STOP_EVENT, {
    bubbles: true,
    composed: true,
    cancelable: true,
    detail: { source: 'jupyter-torchdist', run }
  });
  return !origin.dispatchEvent(event);
}

/** The event a background run's (or a sweep's) view dispatches when it has ended: its report goes in its place. */
export const REPORT_EVENT = 'jupyter-torchdist:report';

/** Ask for the view's output to become `bundle` (a MIME bundle); true when a handler took it. */
/** Told to the kernel once the report is in the widget's place: it closes the widget (`views/live.py`). */
export const REPORT_PLACED = 'report-placed';

export function requestReport(origin: HTMLElement, bundle: Record<string, unknown>): boolean {
  const event = new CustomEvent(REPORT_EVENT, {
    bubbles: true,
    composed: true,
    cancelable: true,
    detail: { source: 'jupyter-torchdist', bundle }
  });
  return !origin.dispatchEvent(event);
}
