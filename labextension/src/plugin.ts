/**
 * The JupyterLab / Notebook 7 plugin behind the live view's Stop and Stacks
 * buttons (see `stop.ts`, `stacks.ts`): a stop event from inside a notebook
 * interrupts that notebook's kernel (a background run's: asks the kernel, over
 * its control channel, to stop that run only); a stacks event asks it, over
 * its control channel (`control.ts`), for every rank's stack; a focus event (a rank
 * opened in a many-rank run's view, `paged.ts`) asks it the same way for that rank's full row. When a background
 * run (or a sweep) has ended, its report event puts the report in the view's
 * place in the notebook (`report.ts`), so the saved notebook holds the report.
 *
 * It finds the notebook through the application shell (the widget whose
 * node holds the button, with a `sessionContext`), so it needs no token from
 * `@jupyterlab/notebook` and works in any shell that lists its widgets.
 */
import { Widget } from '@lumino/widgets';

import { IControlKernel, sendRequest } from './control';
import runsPlugin from './runs_plugin';
import { FOCUS_EVENT } from './paged';
import { replaceOutput } from './report';
import { STACKS_EVENT } from './stacks';
import { REPORT_EVENT, STOP_EVENT, STOP_FLAG } from './stop';

/** The parts of a notebook panel's session context we use. */
interface IKernelLike extends IControlKernel {
  interrupt(): Promise<void>;
}

interface ISessionContextLike {
  session?: { kernel?: IKernelLike | null } | null;
}

/** The parts of `JupyterFrontEnd` we use. */
export interface IAppLike {
  shell: { widgets(area?: string): Iterable<Widget> };
}

const AREAS = ['main', 'down', 'left', 'right'];

function sessionOf(widget: Widget): ISessionContextLike | null {
  const context = (widget as unknown as { sessionContext?: ISessionContextLike }).sessionContext;
  return context && typeof context === 'object' ? context : null;
}

/** The document widget (a notebook panel) that contains `node`. */
export function panelFor(app: IAppLike, node: Node): Widget | null {
  for (const area of AREAS) {
    let widgets: Iterable<Widget>;
    try {
      widgets = app.shell.widgets(area);
    } catch {
      continue; // this shell has no such area
    }
    for (const widget of widgets) {
      if (widget.node.contains(node)) {
        return widget;
      }
    }
  }
  return null;
}

/** The kernel of the document widget (a notebook panel) that contains `node`. */
export function kernelFor(app: IAppLike, node: Node): IKernelLike | null {
  const panel = panelFor(app, node);
  const kernel = panel ? sessionOf(panel)?.session?.kernel : null;
  return kernel && typeof kernel.interrupt === 'function' ? kernel : null;
}

function origin(event: Event): Node | null {
  const first = event.composedPath()[0];
  return first instanceof Node ? first : null;
}

function runOf(event: Event): number | null {
  const run = (event as CustomEvent<{ run?: unknown }>).detail?.run;
  return typeof run === 'number' ? run : null;
}

function onStop(app: IAppLike, event: Event): void {
  const node = origin(event);
  const kernel = node ? kernelFor(app, node) : null;
  if (!kernel) {
    return; // not handled: the view tells the user how to stop it by hand
  }
  const run = runOf(event);
  if (run !== null) {
    if (sendRequest(kernel, { want: 'stop', run })) {
      event.preventDefault(); // a background run: that run only, never the cell running now
    }
    return;
  }
  event.preventDefault();
  kernel.interrupt().catch(reason => {
    console.error('jupyter-torchdist: could not interrupt the kernel', reason);
  });
}

const plugin = {
  id: 'jupyter-torchdist:stop',
  description: 'Lets the %%distribute live view stop its run by interrupting the notebook kernel.',
  autoStart: true,
  activate: (app: IAppLike): void => {
    document.addEventListener(STOP_EVENT, event => onStop(app, event));
    document.addEventListener(STACKS_EVENT, event => {
      const node = origin(event);
      const kernel = node ? kernelFor(app, node) : null;
      const run = runOf(event);
      if (kernel && sendRequest(kernel, run === null ? { want: 'stacks' } : { want: 'stacks', run })) {
        event.preventDefault();
      }
    });
    document.addEventListener(FOCUS_EVENT, event => {
      const node = origin(event);
      const kernel = node ? kernelFor(app, node) : null;
      const run = runOf(event);
      const raw = (event as CustomEvent<{ ranks?: unknown }>).detail?.ranks;
      const ranks = Array.isArray(raw) ? raw.filter(r => Number.isInteger(r)) : [];
      const content: Record<string, unknown> = { want: 'focus', ranks };
      if (run !== null) {
        content.run = run;
      }
      if (kernel && sendRequest(kernel, content)) {
        event.preventDefault();
      }
    });
    document.addEventListener(REPORT_EVENT, event => {
      const node = origin(event);
      const panel = node ? panelFor(app, node) : null;
      const bundle = (event as CustomEvent<{ bundle?: unknown }>).detail?.bundle;
      if (panel && node && bundle && typeof bundle === 'object' && replaceOutput(panel, node, bundle)) {
        event.preventDefault();
      }
    });
    (window as unknown as Record<string, unknown>)[STOP_FLAG] = true;
  }
};

export default [plugin, runsPlugin];
