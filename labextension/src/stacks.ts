/**
 * Where each rank is: the live view's Stacks control and the section that shows every rank's stack.
 *
 * The control reaches the kernel the way Stop does (`stop.ts`): the kernel's main thread is busy in the run,
 * so the button sends a bubbling DOM event, which the JupyterLab plugin (`plugin.ts`) turns into a request on
 * the kernel's control channel (read by a thread of its own). The run asks every rank where it is; the
 * answers arrive with the next snapshot, and the section opens to show them. The same section shows the
 * stacks a stall or a stop asked for, in the live view and in the saved report.
 */
import { details, el, isObject, rankId } from './dom';
import { count, num, str } from './format';
import { IN_FLIGHT, IViewState, P, StopState } from './model';
import { IFrame, IPlace, IRankSnapshot, IRunSnapshot } from './types';

/** The event the Stacks control dispatches; bubbles and crosses shadow roots. */
export const STACKS_EVENT = 'jupyter-torchdist:stacks';

/** Ask for every rank's stack from `origin` (`run`: that run's); true when a handler took it. */
export function requestStacks(origin: HTMLElement, run: number | null = null): boolean {
  const event = new CustomEvent(STACKS_EVENT, {
    bubbles: true,
    composed: true,
    cancelable: true,
    detail: { source: 'jupyter-torchdist', run }
  });
  return !origin.dispatchEvent(event);
}

/** The Stacks button of a run in flight (a hint where no plugin can carry the request). */
export function stacksControl(status: string, stacks: StopState): HTMLElement | null {
  if (!IN_FLIGHT.includes(status)) {
    return null;
  }
  const button = el('button', `${P}-stacksButton`, stacks === 'sent' ? 'Stacks \u2026' : 'Stacks');
  button.type = 'button';
  button.dataset.action = 'stacks';
  button.dataset.stacks = stacks;
  button.disabled = stacks === 'hint' || stacks === 'unreachable';
  button.title =
    stacks === 'hint'
      ? 'Needs the jupyter-torchdist extension (JupyterLab, Notebook 7); an interrupt also shows where each rank was'
      : stacks === 'unreachable'
        ? 'The notebook holding this view was not found'
        : 'Show where each rank is now: its stack, and the collective it waits in';
  return button;
}

function place(r: IRankSnapshot): IPlace | null {
  return isObject(r.place) ? (r.place as IPlace) : null;
}

function frameLine(f: IFrame): string {
  const where = str(f.where);
  const folded = num(f.library) ?? 0;
  if (folded > 0) {
    const fn = str(f.name);
    return `  \u22ef ${count(folded)} library frame${folded === 1 ? '' : 's'} \u00b7 ${where}${fn ? ` in ${fn}` : ''}`;
  }
  return `  ${where}${str(f.code) ? `  ${str(f.code)}` : ''}`;
}

function stackOf(p: IPlace): HTMLElement {
  const pre = el('pre', `${P}-stack`);
  const frames = Array.isArray(p.frames) ? (p.frames.filter(isObject) as IFrame[]) : [];
  frames.forEach((f, i) => {
    const folded = (num(f.library) ?? 0) > 0;
    pre.appendChild(el('span', folded ? `${P}-frameLib` : `${P}-frame`, frameLine(f)));
    if (i < frames.length - 1) {
      pre.appendChild(document.createTextNode('\n'));
    }
  });
  return pre;
}

export function rankPlace(id: number, p: IPlace): HTMLElement {
  const box = el('div', `${P}-place`);
  box.dataset.rank = String(id);
  const head = el('div', `${P}-placeHead`);
  head.appendChild(el('span', `${P}-placeRank`, `rank ${id}`));
  head.appendChild(el('span', `${P}-placeSummary`, str(p.summary)));
  box.appendChild(head);
  if (Array.isArray(p.frames) && p.frames.length) {
    box.appendChild(stackOf(p));
  }
  return box;
}

function title(snap: IRunSnapshot, placed: IPlace[], live: boolean): string {
  const ages = placed.map(p => num(p.age_s)).filter((a): a is number => a !== null);
  const age = live && ages.length ? ` \u00b7 taken ${Math.round(Math.min(...ages))} s ago` : '';
  const ended = !IN_FLIGHT.includes(str(snap.status));
  return `${ended ? 'Where each rank was' : 'Where each rank is'}${age}`;
}

/** Every rank's place and stack, once any was asked for; open on a stall, a stop, or when the user asked. */
export function stacksSection(
  snap: IRunSnapshot,
  ranks: IRankSnapshot[],
  state: IViewState,
  live: boolean
): HTMLDetailsElement | null {
  const placed = ranks.map(place).filter((p): p is IPlace => p !== null);
  if (!placed.length) {
    return null;
  }
  const status = str(snap.status);
  const open = Boolean(str(snap.stall)) || status === 'timeout' || status === 'interrupted' || live;
  const section = details('stacks', title(snap, placed, live), open, state, `${P}-stacks`);
  ranks.forEach((r, i) => {
    const p = place(r);
    if (p) {
      section.appendChild(rankPlace(rankId(r, i), p));
    }
  });
  return section;
}
