/**
 * A report on the page that redraws in place: the saved report's renderer
 * and the live widget both use it, so they look and behave the same.
 *
 * Each draw builds a fresh tree (`render.ts`) and patches it into the page
 * (`morph.ts`), so nodes, scroll positions, hover and clicks survive ten
 * redraws a second. What the user changed (open sections, the picked log,
 * scroll) lives here, not in the snapshot, and is handled by delegation.
 */
import { morphChildren } from './morph';
import { emptyState, ILiveOptions, IViewState, renderReport } from './render';

const P = 'jp-TorchDist';

export interface IReportViewOptions {
  /** Called when the user presses the live view's Stop button. */
  onStop?: (button: HTMLElement) => void;
  /** Called when the user presses the live view's Stacks button. */
  onStacks?: (button: HTMLElement) => void;
  /** Called when the user opens a rank's details in a many-rank run (null: closes them). */
  onFocus?: (rank: number | null) => void;
}

function atBottom(node: HTMLElement): boolean {
  return node.scrollHeight - node.scrollTop - node.clientHeight <= 4;
}

export class ReportView {
  constructor(host: HTMLElement, options: IReportViewOptions = {}) {
    this._root = document.createElement('div');
    this._root.className = `${P}-root`;
    host.appendChild(this._root);
    this._onStop = options.onStop ?? null;
    this._onStacks = options.onStacks ?? null;
    this._onFocus = options.onFocus ?? null;
    this._root.addEventListener('click', this._click);
    this._root.addEventListener('input', this._input);
    this._root.addEventListener('keydown', this._key);
    // toggle and scroll do not bubble: listen in the capture phase.
    this._root.addEventListener('toggle', this._toggle, true);
    this._root.addEventListener('scroll', this._scroll, true);
  }

  /** The view's own element (inside the host given to the constructor). */
  get node(): HTMLElement {
    return this._root;
  }

  /** Draw `data` (a run snapshot), keeping what the user changed. */
  render(data: unknown, live: ILiveOptions | null = null): void {
    this._data = data;
    this._live = live;
    this._draw();
  }

  /** Scroll positions are lost while the view is detached: put them back. */
  restoreScroll(): void {
    const table = this._root.querySelector<HTMLElement>(`.${P}-tableWrap`);
    if (table) {
      table.scrollTop = this._tableScroll;
    }
    const log = this._root.querySelector<HTMLElement>(`.${P}-log`);
    if (log) {
      log.scrollTop = this._logScroll ?? log.scrollHeight;
    }
  }

  dispose(): void {
    this._root.removeEventListener('click', this._click);
    this._root.removeEventListener('input', this._input);
    this._root.removeEventListener('keydown', this._key);
    this._root.removeEventListener('toggle', this._toggle, true);
    this._root.removeEventListener('scroll', this._scroll, true);
    this._root.remove();
  }

  /** How long the last draw took (build and patch), in milliseconds; also the root's `data-render-ms`. */
  get lastDrawMs(): number {
    return this._drawMs;
  }

  private _draw(): void {
    const started = performance.now();
    const next = document.createElement('div');
    next.appendChild(renderReport(this._data, this._state, this._live));
    morphChildren(this._root, next);
    this._drawMs = performance.now() - started;
    this._root.dataset.renderMs = this._drawMs.toFixed(2);
    const log = this._root.querySelector<HTMLElement>(`.${P}-log`);
    if (log && this._logScroll === null) {
      log.scrollTop = log.scrollHeight; // follow the end of the log
    }
  }

  private _click = (event: MouseEvent): void => {
    const hit = (event.target as Element | null)?.closest?.('[data-action]');
    if (!(hit instanceof HTMLElement) || !this._root.contains(hit)) {
      return;
    }
    switch (hit.dataset.action) {
      case 'pick':
        this._pick(hit);
        break;
      case 'open-rank':
        this._openRankAt(hit);
        break;
      case 'close-rank':
        this._openRank(null);
        break;
      case 'page':
        this._state.page = Math.max(0, Number(hit.dataset.page) || 0);
        this._draw();
        break;
      case 'sort':
        this._sortBy(hit.dataset.sort ?? null);
        break;
      case 'search':
        this._search(hit.dataset.search ?? '');
        break;
      case 'log-all':
        this._state.logAll = !this._state.logAll;
        this._draw();
        break;
      case 'stop':
        this._onStop?.(hit);
        break;
      case 'stacks':
        this._state.details.stacks = true; // the answers open where the user looks
        this._onStacks?.(hit);
        break;
    }
  };

  /** Show a rank's log: a clicked row or rank link. */
  private _pick(hit: HTMLElement): void {
    if (hit.tagName === 'TR' && window.getSelection()?.toString()) {
      return; // the user is selecting text in the row, not picking it
    }
    this._state.logRank = Number(hit.dataset.rank);
    this._state.details.logs = true;
    this._logScroll = null;
    this._draw();
    if (hit.tagName === 'TR') {
      this._root.querySelector(`.${P}-logs`)?.scrollIntoView?.({ block: 'nearest' });
    }
  }

  /** Open the clicked rank's details; a second click on its row closes them. */
  private _openRankAt(hit: HTMLElement): void {
    if (hit.tagName === 'TR' && window.getSelection()?.toString()) {
      return;
    }
    const rank = Number(hit.dataset.rank);
    if (!Number.isFinite(rank)) {
      return;
    }
    const again = this._state.openRank === rank && hit.tagName === 'TR';
    this._openRank(again ? null : rank);
    if (!again) {
      this._root.querySelector(`.${P}-rankDetail`)?.scrollIntoView?.({ block: 'nearest' });
    }
  }

  /** Sort by a column: ascending, then descending, then back to rank order. */
  private _sortBy(key: string | null): void {
    const state = this._state;
    if (state.sort !== key) {
      [state.sort, state.sortDesc] = [key, false];
    } else if (!state.sortDesc) {
      state.sortDesc = true;
    } else {
      [state.sort, state.sortDesc] = [null, false]; // a third click: back to rank order
    }
    state.page = 0;
    this._draw();
  }

  /** Filter the table by a search text (a host's ranks) and show it. */
  private _search(text: string): void {
    this._state.search = text;
    this._state.page = 0;
    this._draw();
    this._root.querySelector(`.${P}-paged`)?.scrollIntoView?.({ block: 'nearest' });
  }

  /** Open (or close: null) a rank's details; the live view asks the kernel for the rank's full row. */
  private _openRank(rank: number | null): void {
    this._state.openRank = rank;
    this._logScroll = null;
    this._draw();
    this._onFocus?.(rank);
  }

  private _input = (event: Event): void => {
    const input = event.target;
    if (input instanceof HTMLInputElement && input.classList.contains(`${P}-search`)) {
      this._state.search = input.value;
      this._state.page = 0;
      this._draw();
    }
  };

  /** Enter (or space) on an outlier opens it, as a click does. */
  private _key = (event: KeyboardEvent): void => {
    const node = event.target;
    if (
      (event.key === 'Enter' || event.key === ' ') &&
      node instanceof HTMLElement &&
      node.tagName === 'LI' &&
      node.dataset.action === 'open-rank'
    ) {
      event.preventDefault();
      node.click();
    }
  };

  private _toggle = (event: Event): void => {
    const section = event.target;
    if (!(section instanceof HTMLDetailsElement) || !section.dataset.k) {
      return;
    }
    const key = section.dataset.k;
    if (section.open === (section.dataset.default === 'open')) {
      delete this._state.details[key];
    } else {
      this._state.details[key] = section.open;
    }
    if (key === 'logs') {
      this._draw(); // the table marks the shown rank only while the logs are open
    }
  };

  private _scroll = (event: Event): void => {
    const node = event.target;
    if (!(node instanceof HTMLElement) || !node.isConnected || !node.clientHeight) {
      return; // a hidden or detached view reports zeros: keep what we had
    }
    if (node.classList.contains(`${P}-log`)) {
      this._logScroll = atBottom(node) ? null : node.scrollTop;
    } else if (node.classList.contains(`${P}-tableWrap`)) {
      this._tableScroll = node.scrollTop;
    }
  };

  private readonly _root: HTMLElement;
  private readonly _onStop: ((button: HTMLElement) => void) | null;
  private readonly _onStacks: ((button: HTMLElement) => void) | null;
  private readonly _onFocus: ((rank: number | null) => void) | null;
  private _drawMs = 0;
  private _data: unknown = null;
  private _live: ILiveOptions | null = null;
  private _state: IViewState = emptyState();
  private _tableScroll = 0;
  /** null: follow the end of the log. */
  private _logScroll: number | null = null;
}
