/**
 * The JupyterLab / Notebook 7 plugin behind the live view's Stop and Stacks
 * buttons (see `stop.ts`, `stacks.ts`): a stop event from inside a notebook
 * interrupts that notebook's kernel; a stacks event asks it, over its control
 * channel (`control.ts`), for every rank's stack.
 *
 * It finds the notebook through the application shell (the widget whose
 * node holds the button, with a `sessionContext`), so it needs no token from
 * `@jupyterlab/notebook` and works in any shell that lists its widgets.
 */
import { Widget } from '@lumino/widgets';

import { IControlKernel, sendRequest } from './control';
import { STACKS_EVENT } from './stacks';
import { STOP_EVENT, STOP_FLAG } from './stop';

/** The parts of a notebook panel's session context we use. */
interface IKernelLike extends IControlKernel {
  interrupt(): Promise<void>;
}

interface ISessionContextLike {
  session?: { kernel?: IKernelLike | null } | null;
}

/** The parts of `JupyterFrontEnd` we use. */
interface IAppLike {
  shell: { widgets(area?: string): Iterable<Widget> };
}

const AREAS = ['main', 'down', 'left', 'right'];

function sessionOf(widget: Widget): ISessionContextLike | null {
  const context = (widget as unknown as { sessionContext?: ISessionContextLike }).sessionContext;
  return context && typeof context === 'object' ? context : null;
}

/** The kernel of the document widget (a notebook panel) that contains `node`. */
export function kernelFor(app: IAppLike, node: Node): IKernelLike | null {
  for (const area of AREAS) {
    let widgets: Iterable<Widget>;
    try {
      widgets = app.shell.widgets(area);
    } catch {
      continue; // this shell has no such area
    }
    for (const widget of widgets) {
      if (widget.node.contains(node)) {
        const kernel = sessionOf(widget)?.session?.kernel;
        return kernel && typeof kernel.interrupt === 'function' ? kernel : null;
      }
    }
  }
  return null;
}

const plugin = {
  id: 'jupyter-torchdist:stop',
  description: 'Lets the %%distribute live view stop its run by interrupting the notebook kernel.',
  autoStart: true,
  activate: (app: IAppLike): void => {
    document.addEventListener(STOP_EVENT, event => {
      const origin = event.composedPath()[0];
      const kernel = origin instanceof Node ? kernelFor(app, origin) : null;
      if (!kernel) {
        return; // not handled: the view tells the user to interrupt by hand
      }
      event.preventDefault();
      kernel.interrupt().catch(reason => {
        console.error('jupyter-torchdist: could not interrupt the kernel', reason);
      });
    });
    document.addEventListener(STACKS_EVENT, event => {
      const origin = event.composedPath()[0];
      const kernel = origin instanceof Node ? kernelFor(app, origin) : null;
      if (kernel && sendRequest(kernel, { want: 'stacks' })) {
        event.preventDefault();
      }
    });
    (window as unknown as Record<string, unknown>)[STOP_FLAG] = true;
  }
};

export default plugin;
