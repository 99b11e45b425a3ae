/**
 * A background run's (or a sweep's) report in place of its live view, in the notebook itself.
 *
 * A foreground run's view becomes its report through a display update from the kernel. A background run
 * ends while other cells execute (or none), and JupyterLab applies a display update only to the cell whose
 * execution sent it, so the kernel's update does not reach the run's own cell. The widget therefore asks for
 * it here (`REPORT_EVENT`): the output holding the widget is replaced, in the notebook's model, by the report's
 * MIME bundle, which the renderer (`index.ts`) draws, and which a saved notebook keeps. Only the notebook's
 * public model is used (duck-typed, as `plugin.ts` finds kernels: no `@jupyterlab/notebook` token needed).
 */
import { Widget } from '@lumino/widgets';

const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

interface IOutputsLike {
  length: number;
  get(index: number): { toJSON?(): unknown } | undefined;
  set(index: number, output: Record<string, unknown>): void;
}

interface ICellLike {
  node: HTMLElement;
  model?: { outputs?: IOutputsLike };
  outputArea?: { widgets?: readonly Widget[] };
}

function cellsOf(panel: Widget): readonly ICellLike[] {
  const content = (panel as unknown as { content?: { widgets?: readonly ICellLike[] } }).content;
  return Array.isArray(content?.widgets) ? content.widgets : [];
}

function holdsWidget(output: { toJSON?(): unknown } | undefined): boolean {
  const json = output?.toJSON?.() as { data?: Record<string, unknown> } | undefined;
  return Boolean(json?.data && WIDGET_MIME in json.data);
}

/** Replace the output of `panel` that holds `node` with `bundle`; false when it was not found. */
export function replaceOutput(panel: Widget, node: Node, bundle: object): boolean {
  const cell = cellsOf(panel).find(c => c.node.contains(node));
  const outputs = cell?.model?.outputs;
  const shown = cell?.outputArea?.widgets;
  if (!cell || !outputs || !shown) {
    return false;
  }
  const index = shown.findIndex(w => w.node.contains(node));
  if (index < 0 || index >= outputs.length || !holdsWidget(outputs.get(index))) {
    return false;
  }
  outputs.set(index, { output_type: 'display_data', data: bundle, metadata: {} });
  return true;
}
